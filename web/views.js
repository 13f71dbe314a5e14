// The console's views. Each takes a context `{main, namespace, watch(path, f)}` and
// fills `main`; the watches it opens end when the view is left. OpenShift
// DeploymentConfigs and ReplicationControllers, apps/v1 workloads (Deployments,
// StatefulSets, DaemonSets), batch/v1 Jobs and CronJobs, pods, events, nodes, YAML.

import * as api from './api.js';
import { h, fill, setText, table, ageCell, replicasCell, duration } from './dom.js';
import { toYaml, header } from './yaml.js';

const CONFIG_LABEL = 'openshift.io/deployment-config.name';
const VERSION_ANN = 'openshift.io/deployment-config.latest-version';
const PHASE_ANN = 'openshift.io/deployment.phase';
const REASON_ANN = 'openshift.io/deployment.status-reason';
const CANCELLED_ANN = 'openshift.io/deployment.cancelled';
const DEPLOYER_FOR_LABEL = 'openshift.io/deployer-pod-for.name';

const ann = (o, k) => (o.metadata.annotations || {})[k];
const created = (o) => o.metadata.creationTimestamp;
const byName = (a, b) => a.metadata.name.localeCompare(b.metadata.name, undefined, { numeric: true });
const rcPhase = (rc) => (rc ? ann(rc, PHASE_ANN) || '-' : '-');
const rcVersion = (rc) => Number(ann(rc, VERSION_ANN) || 0);
const terminal = (phase) => phase === 'Complete' || phase === 'Failed';
const enc = encodeURIComponent;

function phaseBadge(td, phase) {
  setText(td, phase);
  td.dataset.value = phase;
}

function heading(title, ...extra) {
  return h('div', { class: 'view-head' }, h('h2', null, title), ...extra);
}

function errorText(e) {
  return e instanceof Error ? e.message : String(e);
}

/// A table cell of an object's conditions (`Type`, or `Type=Status` when not True).
function conditionsCell(td, conds) {
  const list = conds || [];
  const text = list.map((c) => `${c.type}=${c.status}`).join(' ');
  if (td.dataset.text === text && td.firstChild) return;
  td.dataset.text = text;
  fill(td, list.map((c) => h('span', { class: 'cond', 'data-type': c.type, 'data-status': c.status, title: [c.reason, c.message].filter(Boolean).join(': ') }, c.status === 'True' ? c.type : `${c.type}=${c.status}`)));
  if (!td.firstChild) td.textContent = '-';
}

/// The `#conditions` list of a detail page.
function conditionList(ul, conds) {
  fill(
    ul,
    (conds || []).map((c) =>
      h('li', { 'data-type': c.type, 'data-status': c.status }, h('strong', null, c.type), ` ${c.status}`, c.reason ? ` · ${c.reason}` : '', c.message ? h('span', { class: 'message' }, c.message) : null),
    ),
  );
  if (!(conds || []).length) ul.append(h('li', null, 'No conditions yet.'));
}

// ---- DeploymentConfigs ----

function triggers(dc) {
  const t = (dc.spec.triggers || []).map((t) => t.type);
  return t.length ? t.join(', ') : 'manual';
}

export function dcs(ctx) {
  const t = table(
    'dcs',
    [
      {
        cls: 'name',
        head: 'Name',
        render(td, dc, fresh) {
          if (fresh) td.append(h('a', { href: `#/dcs/${enc(dc.metadata.name)}`, text: dc.metadata.name }));
        },
      },
      { cls: 'version', head: 'Version', text: (dc) => dc.status?.latestVersion ?? 0 },
      {
        cls: 'phase',
        head: 'Phase',
        render: (td, dc) => phaseBadge(td, rcPhase(latestRc.get(dc.metadata.name))),
      },
      {
        cls: 'replicas',
        head: 'Replicas',
        render: (td, dc) => replicasCell(td, dc.status?.readyReplicas ?? 0, dc.spec.replicas ?? 0, dc.status?.replicas ?? 0),
      },
      { cls: 'conditions', head: 'Conditions', render: (td, dc) => conditionsCell(td, dc.status?.conditions) },
      { cls: 'trigger', head: 'Trigger', text: (dc) => triggers(dc) + (dc.spec.paused ? ' (paused)' : '') },
      { cls: 'age', head: 'Age', render: (td, dc) => ageCell(td, created(dc)) },
    ],
    'data-dc',
  );
  const latestRc = new Map();
  let configs = [];
  let rcs = [];
  const render = () => {
    latestRc.clear();
    const rcByName = new Map(rcs.map((rc) => [rc.metadata.name, rc]));
    for (const dc of configs) {
      const v = dc.status?.latestVersion ?? 0;
      if (v > 0) latestRc.set(dc.metadata.name, rcByName.get(`${dc.metadata.name}-${v}`));
    }
    t.update([...configs].sort(byName), (dc) => dc.metadata.name, `No deployment configs in ${ctx.namespace}. Create one from YAML.`);
  };
  fill(ctx.main, heading('Deployment configs', h('a', { class: 'button', href: '#/create' }, 'Create')), t.el);
  ctx.watch(`${api.apps(ctx.namespace)}/deploymentconfigs`, (items) => {
    configs = items;
    render();
  });
  ctx.watch(`${api.ns(ctx.namespace)}/replicationcontrollers`, (items) => {
    rcs = items;
    render();
  });
}

export function dcDetail(ctx, name) {
  const dcPath = `${api.apps(ctx.namespace)}/deploymentconfigs/${enc(name)}`;
  let dc = null;
  let history = [];

  const status = h('p', { class: 'summary' });
  const conditions = h('ul', { id: 'conditions', class: 'condition-list' });
  const actionError = h('p', { id: 'action-error', class: 'error', role: 'alert' });
  const actionInfo = h('p', { id: 'action-result', class: 'info', role: 'status' });
  const undoSelect = h('select', { id: 'undo-revision', 'aria-label': 'Undo to revision' }, h('option', { value: '' }, 'previous'));
  const log = h('pre', { id: 'deployer-log', class: 'log', tabindex: '0', 'aria-label': 'Deployer log' });
  const logTitle = h('h3', null, 'Deployer log');

  const button = (action, label, run) =>
    h('button', { type: 'button', 'data-action': action, onclick: () => act(action, run) }, label);

  async function act(action, run) {
    setText(actionError, '');
    setText(actionInfo, '');
    const buttons = ctx.main.querySelectorAll('.actions button');
    buttons.forEach((b) => (b.disabled = true));
    try {
      if (!dc) throw new Error(`deploymentconfig "${name}" not found`);
      const said = await run();
      setText(actionInfo, said || `${action}: done`);
    } catch (e) {
      setText(actionError, errorText(e));
    } finally {
      buttons.forEach((b) => (b.disabled = false));
      updateButtons();
    }
  }

  // Waiters for a state of the history to come in by the watch (never by asking again).
  const waiters = new Set();
  function until(pred, ms, what) {
    if (pred()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const w = { pred, resolve };
      const timer = setTimeout(() => {
        waiters.delete(w);
        reject(new Error(what));
      }, ms);
      w.resolve = () => {
        clearTimeout(timer);
        resolve();
      };
      waiters.add(w);
    });
  }

  // The actions decide on the stored state, like `berth rollout` does: the DC and its
  // deployments, newest first. A deployment the DC already counts but whose RC the
  // controller has not written yet is waited for (by the watch).
  async function stored() {
    const config = await api.get(dcPath);
    const v = config.status?.latestVersion ?? 0;
    if (v > 0) await until(() => history.some((rc) => rcVersion(rc) >= v), 15000, `deployment #${v} has not been created yet`);
    const list = await api.get(`${api.ns(ctx.namespace)}/replicationcontrollers?labelSelector=${enc(`${CONFIG_LABEL}=${name}`)}`);
    const rcs = (list.items || []).sort((a, b) => rcVersion(b) - rcVersion(a));
    return { config, rcs, latest: rcs.find((rc) => rcVersion(rc) === v) };
  }
  const latest = () => history.find((rc) => rcVersion(rc) === (dc?.status?.latestVersion ?? 0));
  const notPaused = (config, what) => {
    if (config.spec.paused) throw new Error(`cannot ${what} a paused deployment config; resume it first`);
  };

  const actions = h(
    'div',
    { class: 'actions' },
    button('deploy', 'Deploy latest', async () => {
      const config = await api.get(dcPath);
      notPaused(config, 'deploy');
      const v = config.status?.latestVersion ?? 0;
      if (v > 0) {
        let rc = null;
        try {
          rc = await api.get(`${api.ns(ctx.namespace)}/replicationcontrollers/${enc(`${name}-${v}`)}`);
        } catch (e) {
          if (e.code !== 404) throw e;
        }
        if (rc && !terminal(rcPhase(rc))) throw new Error(`#${v} is already in progress (${rcPhase(rc)}).`);
      }
      const body = { kind: 'DeploymentRequest', apiVersion: 'apps.openshift.io/v1', name, latest: true, force: true };
      const out = await api.post(`${dcPath}/instantiate`, body);
      return `rolled out #${out?.status?.latestVersion ?? ''}`;
    }),
    button('cancel', 'Cancel', async () => {
      const { config, rcs } = await stored();
      notPaused(config, 'cancel');
      if (!rcs.length) throw new Error(`there have been no replication controllers for ${ctx.namespace}/${name}`);
      const running = rcs.filter((rc) => !terminal(rcPhase(rc)));
      if (!running.length) throw new Error(`No rollout is in progress (latest rollout #${rcVersion(rcs[0])} ${rcPhase(rcs[0]).toLowerCase()}).`);
      for (const rc of running) {
        if (ann(rc, CANCELLED_ANN) === 'true') continue;
        await api.mergePatch(`${api.ns(ctx.namespace)}/replicationcontrollers/${enc(rc.metadata.name)}`, {
          metadata: { annotations: { [CANCELLED_ANN]: 'true', [REASON_ANN]: 'cancelled by the user' } },
        });
      }
      return `cancelling #${running.map(rcVersion).join(', #')}`;
    }),
    button('retry', 'Retry', async () => {
      const { config, latest: rc } = await stored();
      notPaused(config, 'retry');
      if (!rc) throw new Error(`no rollouts found for "${name}"`);
      const phase = rcPhase(rc);
      if (phase !== 'Failed') throw new Error(`rollout #${rcVersion(rc)} is ${phase.toLowerCase()}; only failed deployments can be retried.`);
      const pods = await api.get(`${api.ns(ctx.namespace)}/pods?labelSelector=${enc(`${DEPLOYER_FOR_LABEL}=${rc.metadata.name}`)}`);
      for (const pod of pods.items || []) {
        try {
          await api.del(`${api.ns(ctx.namespace)}/pods/${enc(pod.metadata.name)}`, { kind: 'DeleteOptions', apiVersion: 'v1', gracePeriodSeconds: 0 });
        } catch (e) {
          if (e.code !== 404) throw new Error(`failed to delete deployer pod ${pod.metadata.name} for deployment #${rcVersion(rc)}: ${e.message}`);
        }
      }
      await api.mergePatch(`${api.ns(ctx.namespace)}/replicationcontrollers/${enc(rc.metadata.name)}`, {
        metadata: { annotations: { [PHASE_ANN]: 'New', [REASON_ANN]: null, [CANCELLED_ANN]: null } },
      });
      return `retried rollout #${rcVersion(rc)}`;
    }),
    h('span', { class: 'undo' }, button('undo', 'Undo', async () => {
      notPaused(await api.get(dcPath), 'roll back');
      const revision = Number(undoSelect.value || 0);
      const body = {
        kind: 'DeploymentConfigRollback',
        apiVersion: 'apps.openshift.io/v1',
        name,
        spec: { from: { name: '' }, revision, includeTemplate: true },
      };
      // The controller may write the DC in between: then roll back again from the newer one.
      for (let attempt = 0; ; attempt++) {
        const rolled = await api.post(`${dcPath}/rollback`, body);
        try {
          await api.put(dcPath, rolled);
          return revision ? `rolled back to #${revision}` : 'rolled back';
        } catch (e) {
          if (e.code !== 409 || attempt >= 5) throw e;
        }
      }
    }), h('label', { for: 'undo-revision', class: 'visually-hidden' }, 'to revision'), undoSelect),
    button('pause', 'Pause', async () => {
      if ((await api.get(dcPath)).spec.paused) throw new Error(`deploymentconfig "${name}" is already paused`);
      await api.mergePatch(dcPath, { spec: { paused: true } });
      return 'paused';
    }),
    button('resume', 'Resume', async () => {
      if (!(await api.get(dcPath)).spec.paused) throw new Error(`deploymentconfig "${name}" is not paused`);
      await api.mergePatch(dcPath, { spec: { paused: false } });
      return 'resumed';
    }),
    button('scale-down', 'Scale −1', () => scale(-1)),
    button('scale-up', 'Scale +1', () => scale(1)),
    h('a', { class: 'button', 'data-action': 'edit', href: `#/edit/apis/apps.openshift.io/v1/${enc(ctx.namespace)}/deploymentconfigs/${enc(name)}` }, 'Edit'),
  );

  async function scale(by) {
    // From the stored count, not the view's (a watch event may still be on its way).
    const current = await api.get(`${dcPath}/scale`);
    const replicas = (current.spec?.replicas ?? 0) + by;
    if (replicas < 0) throw new Error('already at 0 replicas');
    await api.request('PATCH', `${dcPath}/scale`, { spec: { replicas } }, 'application/merge-patch+json');
    return `scaled to ${replicas}`;
  }

  function updateButtons() {
    if (!dc) return;
    const paused = !!dc.spec.paused;
    ctx.main.querySelector('[data-action="pause"]').hidden = paused;
    ctx.main.querySelector('[data-action="resume"]').hidden = !paused;
  }

  const hist = table(
    'history',
    [
      { cls: 'version', head: 'Revision', text: (rc) => `#${rcVersion(rc)}` },
      {
        cls: 'phase',
        head: 'Phase',
        render(td, rc) {
          phaseBadge(td, rcPhase(rc));
          td.title = ann(rc, CANCELLED_ANN) === 'true' && !terminal(rcPhase(rc)) ? 'cancelling' : '';
        },
      },
      { cls: 'cause', head: 'Cause', text: (rc) => ann(rc, REASON_ANN) || '-' },
      { cls: 'replicas', head: 'Replicas', render: (td, rc) => replicasCell(td, rc.status?.readyReplicas ?? 0, rc.spec.replicas ?? 0, rc.status?.replicas ?? 0) },
      { cls: 'age', head: 'Age', render: (td, rc) => ageCell(td, created(rc)) },
    ],
    'data-version',
  );

  fill(
    ctx.main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/dcs' }, 'Deployment configs'), ' / '),
    heading(name),
    status,
    actions,
    actionError,
    actionInfo,
    h('h3', null, 'Conditions'),
    conditions,
    h('h3', null, 'History'),
    hist.el,
    logTitle,
    log,
  );

  // The deployer log of the latest version, followed; opened again for a new version.
  let logVersion = null;
  let stopLog = null;
  let logEnded = false;
  let logPhase = null;
  function followLog() {
    const v = dc?.status?.latestVersion ?? 0;
    const phase = rcPhase(latest());
    if (v === 0) {
      setText(log, 'No rollout yet.');
      return;
    }
    // A stream that failed (e.g. before the deployer existed) is tried again when the
    // deployment moves on.
    if (v === logVersion && !(logEnded && log.dataset.failed && phase !== logPhase)) return;
    if (stopLog) stopLog();
    logVersion = v;
    logPhase = phase;
    logEnded = false;
    delete log.dataset.failed;
    setText(logTitle, `Deployer log (#${v})`);
    log.textContent = '';
    stopLog = api.follow(
      `${dcPath}/log?follow=true&version=${v}`,
      (text) => {
        const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        log.append(text);
        if (atEnd) log.scrollTop = log.scrollHeight;
      },
      (err) => {
        logEnded = true;
        if (err) {
          log.dataset.failed = 'true';
          log.append(`\n[${errorText(err)}]\n`);
        }
      },
    );
  }
  ctx.onLeave(() => stopLog && stopLog());

  let dcWatch = null;
  function render() {
    if (!dc) {
      setText(status, dcWatch && dcWatch.ready ? `deploymentconfig "${name}" not found in ${ctx.namespace}` : 'Loading…');
      return;
    }
    const s = dc.status || {};
    setText(
      status,
      `#${s.latestVersion ?? 0} · ${s.readyReplicas ?? 0} ready, ${s.updatedReplicas ?? 0} updated, ${s.availableReplicas ?? 0} available of ${dc.spec.replicas ?? 0} · trigger: ${triggers(dc)}${dc.spec.paused ? ' · paused' : ''}`,
    );
    conditionList(conditions, s.conditions);
    const sorted = [...history].sort((a, b) => rcVersion(b) - rcVersion(a));
    hist.update(sorted, (rc) => String(rcVersion(rc)), 'No rollouts yet.');
    for (const w of [...waiters]) {
      if (w.pred()) {
        waiters.delete(w);
        w.resolve();
      }
    }
    const chosen = undoSelect.value;
    fill(
      undoSelect,
      h('option', { value: '' }, 'previous'),
      sorted.filter((rc) => rcVersion(rc) !== (s.latestVersion ?? 0)).map((rc) => h('option', { value: String(rcVersion(rc)) }, `#${rcVersion(rc)}`)),
    );
    undoSelect.value = [...undoSelect.options].some((o) => o.value === chosen) ? chosen : '';
    updateButtons();
    followLog();
  }

  dcWatch = ctx.watch(`${api.apps(ctx.namespace)}/deploymentconfigs?fieldSelector=${enc(`metadata.name=${name}`)}`, (items) => {
    dc = items.find((o) => o.metadata.name === name) || null;
    render();
  });
  ctx.watch(`${api.ns(ctx.namespace)}/replicationcontrollers?labelSelector=${enc(`${CONFIG_LABEL}=${name}`)}`, (items) => {
    history = items;
    render();
  });
  render();
}

// ---- apps/v1 workloads: Deployments, StatefulSets, DaemonSets ----

const REVISION_ANN = 'deployment.kubernetes.io/revision';
const CHANGE_CAUSE_ANN = 'kubernetes.io/change-cause';
const RESTARTED_ANN = 'kubectl.kubernetes.io/restartedAt';
const HASH_LABEL = 'pod-template-hash';

const WORKLOADS = {
  deployments: { kind: 'Deployment', named: 'deployment.apps' },
  statefulsets: { kind: 'StatefulSet', named: 'statefulset.apps' },
  daemonsets: { kind: 'DaemonSet', named: 'daemonset.apps' },
};

/// Ready, desired, current, updated and available counts of a workload.
function workloadCounts(plural, o) {
  const s = o.status || {};
  if (plural === 'daemonsets') {
    return { ready: s.numberReady ?? 0, desired: s.desiredNumberScheduled ?? 0, current: s.currentNumberScheduled ?? 0, updated: s.updatedNumberScheduled ?? 0, available: s.numberAvailable ?? 0 };
  }
  return { ready: s.readyReplicas ?? 0, desired: o.spec.replicas ?? 1, current: s.replicas ?? 0, updated: s.updatedReplicas ?? 0, available: s.availableReplicas ?? 0 };
}

/// A LabelSelector as the `labelSelector` query parameter writes it.
function selectorString(sel) {
  if (!sel) return '';
  const parts = Object.keys(sel.matchLabels || {}).sort().map((k) => `${k}=${sel.matchLabels[k]}`);
  for (const e of sel.matchExpressions || []) {
    const values = (e.values || []).join(',');
    if (e.operator === 'In') parts.push(`${e.key} in (${values})`);
    else if (e.operator === 'NotIn') parts.push(`${e.key} notin (${values})`);
    else if (e.operator === 'Exists') parts.push(e.key);
    else if (e.operator === 'DoesNotExist') parts.push(`!${e.key}`);
  }
  return parts.join(',');
}

/// JSON values equal regardless of key order.
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && same(a[k], b[k]));
}

const controlledBy = (o, uid) => (o.metadata.ownerReferences || []).some((r) => r.controller && r.uid === uid);
const rsRevision = (rs) => Number(ann(rs, REVISION_ANN) || 0);
const crRevision = (cr) => Number(cr.revision || 0);

/// A Deployment's template as a rollback writes it back: without the ReplicaSet's hash.
function withoutHash(template) {
  const t = structuredClone(template || {});
  if (t.metadata?.labels) delete t.metadata.labels[HASH_LABEL];
  return t;
}

/// The template a ControllerRevision holds (its `data` is a patch of the spec).
function revisionTemplate(cr) {
  const t = structuredClone(cr.data?.spec?.template || {});
  delete t.$patch;
  return t;
}

const images = (template) => (template?.spec?.containers || []).map((c) => c.image).join(', ') || '-';

/// RFC 3339 in UTC to the second, as `kubectl rollout restart` stamps it.
const rfc3339Now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

/// Runs a page's actions: one at a time (buttons disabled meanwhile), the server's (or
/// the view's) error in `errorEl`, what was done in `infoEl`; `after()` runs at the end.
function actionRunner(main, errorEl, infoEl, after) {
  return async (action, run) => {
    setText(errorEl, '');
    setText(infoEl, '');
    const buttons = [...main.querySelectorAll('.actions button, td.row-actions button')];
    buttons.forEach((b) => (b.disabled = true));
    try {
      const said = await run();
      setText(infoEl, said || `${action}: done`);
    } catch (e) {
      setText(errorEl, errorText(e));
    } finally {
      buttons.forEach((b) => (b.disabled = false));
      if (after) after();
    }
  };
}

/// A conflict with a write made meanwhile (a JSON patch's `test` of the resourceVersion
/// failing, or a 409): the action starts again from the stored object.
const stale = (e) => e.code === 409 || (e.code === 422 && /resourceVersion/.test(e.message));

export function workloads(ctx) {
  const t = table(
    'workloads',
    [
      { cls: 'kind', head: 'Kind', text: (w) => WORKLOADS[w.plural].kind },
      {
        cls: 'name',
        head: 'Name',
        render(td, w, fresh) {
          // One child: the narrow layout puts each child of a cell in a grid cell.
          if (fresh) td.append(h('span', null, h('a', { href: `#/workloads/${w.plural}/${enc(w.o.metadata.name)}`, text: w.o.metadata.name }), h('span', { class: 'tag', hidden: true }, 'paused')));
          td.querySelector('.tag').hidden = !w.o.spec.paused;
        },
      },
      {
        cls: 'replicas',
        head: 'Ready',
        render(td, w) {
          const c = workloadCounts(w.plural, w.o);
          replicasCell(td, c.ready, c.desired, c.current);
        },
      },
      { cls: 'updated', head: 'Up to date', text: (w) => workloadCounts(w.plural, w.o).updated },
      { cls: 'conditions', head: 'Conditions', render: (td, w) => conditionsCell(td, w.o.status?.conditions) },
      { cls: 'age', head: 'Age', render: (td, w) => ageCell(td, created(w.o)) },
    ],
    'data-workload',
  );
  const lists = { deployments: [], statefulsets: [], daemonsets: [] };
  const render = () => {
    const rows = Object.entries(lists).flatMap(([plural, items]) => [...items].sort(byName).map((o) => ({ plural, o })));
    t.update(rows, (w) => `${w.plural}/${w.o.metadata.name}`, `No deployments, stateful sets or daemon sets in ${ctx.namespace}. Create one from YAML.`);
  };
  fill(ctx.main, heading('Workloads', h('a', { class: 'button', href: '#/create' }, 'Create')), t.el);
  for (const plural of Object.keys(lists)) {
    ctx.watch(`${api.appsV1(ctx.namespace)}/${plural}`, (items) => {
      lists[plural] = items;
      render();
    });
  }
}

/// kubectl's TARGETS of an autoscaler (`cpu: 42%/50%`), each metric with its status.
function hpaTargets(hpa) {
  const specs = hpa.spec?.metrics || [];
  const statuses = hpa.status?.currentMetrics || [];
  if (!specs.length) return '<none>';
  return specs
    .map((m, i) => {
      const st = statuses[i] || {};
      const unknown = '<unknown>';
      switch (m.type) {
        case 'Resource':
        case 'ContainerResource': {
          const key = m.type === 'Resource' ? 'resource' : 'containerResource';
          const spec = m[key] || {};
          const cur = st[key]?.current;
          if (spec.target?.averageValue !== undefined) return `${spec.name}: ${cur?.averageValue ?? unknown}/${spec.target.averageValue}`;
          const target = spec.target?.averageUtilization !== undefined ? `${spec.target.averageUtilization}%` : '<auto>';
          return `${spec.name}: ${cur?.averageUtilization !== undefined ? `${cur.averageUtilization}%` : unknown}/${target}`;
        }
        case 'Pods':
          return `${st.pods?.current?.averageValue ?? unknown}/${m.pods?.target?.averageValue}`;
        case 'Object':
        case 'External': {
          const key = m.type === 'Object' ? 'object' : 'external';
          const target = m[key]?.target || {};
          const cur = st[key]?.current;
          if (target.averageValue !== undefined) return `${cur?.averageValue ?? unknown}/${target.averageValue} (avg)`;
          return `${cur?.value ?? unknown}/${target.value}`;
        }
        default:
          return '<unknown type>';
      }
    })
    .join(', ');
}

export function workloadDetail(ctx, plural, name) {
  const kind = WORKLOADS[plural];
  if (!kind) {
    fill(ctx.main, h('p', { class: 'crumbs' }, h('a', { href: '#/workloads' }, 'Workloads'), ' / '), h('p', { class: 'error' }, `There is no workload kind "${plural}"; the kinds are ${Object.keys(WORKLOADS).join(', ')}.`));
    return;
  }
  const isDeployment = plural === 'deployments';
  const ns = ctx.namespace;
  const path = `${api.appsV1(ns)}/${plural}/${enc(name)}`;
  const named = `${kind.named}/${name}`;
  const childResource = isDeployment ? 'replicasets' : 'controllerrevisions';
  let obj = null;
  let children = [];
  let pods = [];
  let hpas = [];

  const status = h('p', { class: 'summary' });
  const conditions = h('ul', { id: 'conditions', class: 'condition-list' });
  const actionError = h('p', { id: 'action-error', class: 'error', role: 'alert' });
  const actionInfo = h('p', { id: 'action-result', class: 'info', role: 'status' });
  const undoSelect = h('select', { id: 'undo-revision', 'aria-label': 'Undo to revision' }, h('option', { value: '' }, 'previous'));
  const autoscaler = h('section', { id: 'autoscaler', hidden: true });

  const act = actionRunner(ctx.main, actionError, actionInfo, () => updateButtons());
  const button = (action, label, run) =>
    h('button', {
      type: 'button',
      'data-action': action,
      onclick: () =>
        act(action, () => {
          if (!obj) throw new Error(`${kind.named} "${name}" not found`);
          return run();
        }),
    }, label);

  // The objects of `resource` the workload (as stored now) controls, found by its
  // selector and kept by its uid.
  async function controlled(o, resource) {
    const sel = selectorString(o.spec.selector);
    const list = await api.get(`${api.appsV1(ns)}/${resource}${sel ? `?labelSelector=${enc(sel)}` : ''}`);
    return (list.items || []).filter((c) => controlledBy(c, o.metadata.uid));
  }

  async function scale(by) {
    // From the stored count, not the view's (a watch event may still be on its way).
    const current = await api.get(`${path}/scale`);
    const replicas = (current.spec?.replicas ?? 0) + by;
    if (replicas < 0) throw new Error('already at 0 replicas');
    await api.mergePatch(`${path}/scale`, { spec: { replicas } });
    return `${named} scaled to ${replicas}`;
  }

  async function setPaused(pause) {
    const o = await api.get(path);
    if (!!o.spec.paused === pause) throw new Error(`deployments.apps "${name}" is ${pause ? 'already paused' : 'not paused'}`);
    await api.mergePatch(path, { spec: { paused: pause } });
    return `${named} ${pause ? 'paused' : 'resumed'}`;
  }

  async function restart() {
    const o = await api.get(path);
    if (isDeployment && o.spec.paused) throw new Error("can't restart paused deployment (run rollout resume first)");
    await api.mergePatch(path, { spec: { template: { metadata: { annotations: { [RESTARTED_ANN]: rfc3339Now() } } } } });
    return `${named} restarted`;
  }

  // `kubectl rollout undo`: the chosen (or the previous) revision's template written back.
  async function undo() {
    const to = Number(undoSelect.value || 0);
    const pick = (entries, revisionOf, none) => {
      if (to > 0) {
        const target = entries.find((e) => revisionOf(e) === to);
        if (!target) throw new Error(`unable to find specified revision ${to} in history`);
        return target;
      }
      if (entries.length < 2) throw new Error(none);
      return entries[entries.length - 2];
    };
    if (isDeployment) {
      for (let attempt = 0; ; attempt++) {
        const o = await api.get(path);
        if (o.spec.paused) throw new Error("you cannot rollback a paused deployment; resume it first with 'rollout resume' and try again");
        const sets = (await controlled(o, 'replicasets')).sort((a, b) => rsRevision(a) - rsRevision(b));
        const target = pick(sets, rsRevision, `no rollout history found for deployment "${name}"`);
        const template = withoutHash(target.spec.template);
        if (same(template, withoutHash(o.spec.template))) return `${named} skipped rollback (current template already matches revision ${rsRevision(target)})`;
        try {
          await api.jsonPatch(path, [
            { op: 'test', path: '/metadata/resourceVersion', value: o.metadata.resourceVersion },
            { op: 'replace', path: '/spec/template', value: template },
          ]);
          return `${named} rolled back to revision ${rsRevision(target)}`;
        } catch (e) {
          if (!stale(e) || attempt >= 5) throw e;
        }
      }
    }
    const o = await api.get(path);
    const revs = (await controlled(o, 'controllerrevisions')).sort((a, b) => crRevision(a) - crRevision(b));
    const target = pick(revs, crRevision, 'no last revision to roll back to');
    if (same(revisionTemplate(target), o.spec.template)) return `${named} skipped rollback (current template already matches revision ${crRevision(target)})`;
    await api.strategicPatch(path, target.data);
    return `${named} rolled back to revision ${crRevision(target)}`;
  }

  const actions = h(
    'div',
    { class: 'actions' },
    button('restart', 'Restart', restart),
    h('span', { class: 'undo' }, button('undo', 'Undo', undo), h('label', { for: 'undo-revision', class: 'visually-hidden' }, 'to revision'), undoSelect),
    button('pause', 'Pause', () => setPaused(true)),
    button('resume', 'Resume', () => setPaused(false)),
    button('scale-down', 'Scale −1', () => scale(-1)),
    button('scale-up', 'Scale +1', () => scale(1)),
    h('a', { class: 'button', 'data-action': 'edit', href: `#/edit/apis/apps/v1/${enc(ns)}/${plural}/${enc(name)}` }, 'Edit'),
  );

  function updateButtons() {
    const paused = !!obj?.spec?.paused;
    actions.querySelector('[data-action="pause"]').hidden = !isDeployment || paused;
    actions.querySelector('[data-action="resume"]').hidden = !isDeployment || !paused;
    for (const a of ['scale-up', 'scale-down']) actions.querySelector(`[data-action="${a}"]`).hidden = plural === 'daemonsets';
  }

  // The revision the workload runs now: a Deployment's annotation, a StatefulSet's
  // update revision, else the newest ControllerRevision.
  function currentRevision() {
    if (!obj) return 0;
    if (isDeployment) return Number(ann(obj, REVISION_ANN) || 0);
    const update = obj.status?.updateRevision && children.find((cr) => cr.metadata.name === obj.status.updateRevision);
    if (update) return crRevision(update);
    return Math.max(0, ...children.map(crRevision));
  }

  const revisionOf = isDeployment ? rsRevision : crRevision;
  const revisionCell = (td, o) => {
    const rev = revisionOf(o);
    const current = rev === currentRevision();
    const key = `${rev}${current ? ' current' : ''}`;
    if (td.dataset.text === key) return;
    td.dataset.text = key;
    fill(td, h('span', null, `#${rev}`, current ? h('span', { class: 'tag' }, 'current') : null));
  };
  const causeColumn = { cls: 'cause', head: 'Change cause', text: (o) => ann(o, CHANGE_CAUSE_ANN) || '-' };
  const hist = table(
    'history',
    isDeployment
      ? [
          { cls: 'revision', head: 'Revision', render: revisionCell },
          { cls: 'name', head: 'ReplicaSet', text: (rs) => rs.metadata.name },
          { cls: 'replicas', head: 'Ready', render: (td, rs) => replicasCell(td, rs.status?.readyReplicas ?? 0, rs.spec.replicas ?? 0, rs.status?.replicas ?? 0) },
          { cls: 'image', head: 'Images', text: (rs) => images(rs.spec.template) },
          causeColumn,
          { cls: 'age', head: 'Age', render: (td, rs) => ageCell(td, created(rs)) },
        ]
      : [
          { cls: 'revision', head: 'Revision', render: revisionCell },
          { cls: 'name', head: 'ControllerRevision', text: (cr) => cr.metadata.name },
          { cls: 'image', head: 'Images', text: (cr) => images(revisionTemplate(cr)) },
          causeColumn,
          { cls: 'age', head: 'Age', render: (td, cr) => ageCell(td, created(cr)) },
        ],
    'data-revision',
  );
  const podTable = table('workload-pods', podColumns, 'data-pod');

  fill(
    ctx.main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/workloads' }, 'Workloads'), ` / ${kind.kind} /`),
    heading(name),
    status,
    actions,
    actionError,
    actionInfo,
    autoscaler,
    h('h3', null, 'Conditions'),
    conditions,
    h('h3', null, 'History'),
    hist.el,
    h('h3', null, 'Pods'),
    podTable.el,
  );

  function summary() {
    const c = workloadCounts(plural, obj);
    const s = obj.status || {};
    if (isDeployment) {
      return `revision ${ann(obj, REVISION_ANN) || '-'} · ${c.ready} ready, ${c.updated} updated, ${c.available} available of ${c.desired} · strategy: ${obj.spec.strategy?.type || 'RollingUpdate'}${obj.spec.paused ? ' · paused' : ''}`;
    }
    if (plural === 'statefulsets') {
      const revs = s.updateRevision && s.updateRevision !== s.currentRevision ? ` · updating ${s.currentRevision || '-'} → ${s.updateRevision}` : s.currentRevision ? ` · revision ${s.currentRevision}` : '';
      return `${c.ready} ready, ${c.updated} updated, ${s.currentReplicas ?? 0} current of ${c.desired}${revs} · service: ${obj.spec.serviceName || '-'}`;
    }
    return `${c.ready} ready, ${c.updated} updated, ${c.available} available of ${c.desired} scheduled · update strategy: ${obj.spec.updateStrategy?.type || 'RollingUpdate'}`;
  }

  function renderAutoscaler() {
    const mine = hpas.filter((a) => a.spec?.scaleTargetRef?.kind === kind.kind && a.spec.scaleTargetRef.name === name).sort(byName);
    autoscaler.hidden = mine.length === 0;
    if (!mine.length) return;
    fill(
      autoscaler,
      h('h3', null, mine.length > 1 ? 'Autoscalers' : 'Autoscaler'),
      h(
        'ul',
        { class: 'condition-list' },
        mine.map((a) => {
          const s = a.status || {};
          const problems = (s.conditions || []).filter((c) => c.status === 'False');
          return h(
            'li',
            { 'data-hpa': a.metadata.name },
            h('strong', null, a.metadata.name),
            ' ',
            h('span', { class: 'min-max' }, `min ${a.spec.minReplicas ?? 1}, max ${a.spec.maxReplicas}`),
            ' · ',
            h('span', { class: 'hpa-replicas' }, `replicas ${s.currentReplicas ?? 0} current, ${s.desiredReplicas ?? 0} desired`),
            ' · targets ',
            h('span', { class: 'targets' }, hpaTargets(a)),
            problems.map((c) => h('span', { class: 'message' }, `${c.type}: ${c.message || c.reason || c.status}`)),
          );
        }),
      ),
    );
  }

  // The history and pods follow the workload's selector, opened once it is known.
  let watchedSelector = null;
  let childWatch = null;
  let podWatch = null;
  function followSelector() {
    const sel = selectorString(obj.spec.selector);
    if (sel === watchedSelector) return;
    watchedSelector = sel;
    if (childWatch) childWatch.stop();
    if (podWatch) podWatch.stop();
    const q = sel ? `?labelSelector=${enc(sel)}` : '';
    childWatch = ctx.watch(`${api.appsV1(ns)}/${childResource}${q}`, (items) => {
      children = items;
      render();
    });
    podWatch = ctx.watch(`${api.ns(ns)}/pods${q}`, (items) => {
      pods = items;
      render();
    });
  }

  let objWatch = null;
  function render() {
    updateButtons();
    renderAutoscaler();
    if (!obj) {
      setText(status, objWatch && objWatch.ready ? `${kind.named} "${name}" not found in ${ns}` : 'Loading…');
      return;
    }
    followSelector();
    setText(status, summary());
    conditionList(conditions, obj.status?.conditions);
    const mine = children.filter((c) => controlledBy(c, obj.metadata.uid)).sort((a, b) => revisionOf(b) - revisionOf(a));
    hist.update(mine, (c) => String(revisionOf(c)), 'No revisions yet.');
    const current = currentRevision();
    const chosen = undoSelect.value;
    fill(
      undoSelect,
      h('option', { value: '' }, 'previous'),
      mine.filter((c) => revisionOf(c) !== current).map((c) => h('option', { value: String(revisionOf(c)) }, `#${revisionOf(c)}`)),
    );
    undoSelect.value = [...undoSelect.options].some((o) => o.value === chosen) ? chosen : '';
    podTable.update([...pods].sort(byName), (p) => p.metadata.name, 'No pods match its selector.');
  }

  objWatch = ctx.watch(`${api.appsV1(ns)}/${plural}?fieldSelector=${enc(`metadata.name=${name}`)}`, (items) => {
    obj = items.find((o) => o.metadata.name === name) || null;
    render();
  });
  ctx.watch(`${api.autoscaling(ns)}/horizontalpodautoscalers`, (items) => {
    hpas = items;
    render();
  });
  render();
}

// ---- batch/v1: Jobs and CronJobs ----

const INSTANTIATE_ANN = 'cronjob.kubernetes.io/instantiate';

const condTrue = (o, type) => (o.status?.conditions || []).find((c) => c.type === type && c.status === 'True');

/// Complete, Failed, Suspended or Running, from the Job's conditions.
function jobStatus(job) {
  if (condTrue(job, 'Complete')) return 'Complete';
  if (condTrue(job, 'Failed')) return 'Failed';
  if (condTrue(job, 'Suspended')) return 'Suspended';
  return 'Running';
}

/// kubectl's COMPLETIONS: `succeeded/completions` (`/1 of N` for a work queue).
function jobCompletions(job) {
  const done = job.status?.succeeded ?? 0;
  if (job.spec.completions !== undefined && job.spec.completions !== null) return `${done}/${job.spec.completions}`;
  if ((job.spec.parallelism ?? 1) > 1) return `${done}/1 of ${job.spec.parallelism}`;
  return `${done}/1`;
}

/// kubectl's DURATION: from the start to the end, or counting up while it runs.
function durationCell(td, job) {
  const start = job.status?.startTime;
  const end = job.status?.completionTime || condTrue(job, 'Failed')?.lastTransitionTime;
  if (start && !end) {
    ageCell(td, start);
    return;
  }
  delete td.dataset.ts;
  setText(td, start ? duration((Date.parse(end) - Date.parse(start)) / 1000) : '-');
}

// Names as the API server's generateName makes them (no vowels, no look-alikes).
const NAME_CHARS = 'bcdfghjklmnpqrstvwxz2456789';
function randomSuffix(n) {
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  return [...bytes].map((b) => NAME_CHARS[b % NAME_CHARS.length]).join('');
}

/// The Job `kubectl create job --from=cronjob/NAME` makes of a CronJob.
function jobFromCronJob(cj, jobName) {
  const template = cj.spec.jobTemplate || {};
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: jobName,
      annotations: { [INSTANTIATE_ANN]: 'manual', ...(template.metadata?.annotations || {}) },
      labels: template.metadata?.labels,
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'CronJob', name: cj.metadata.name, uid: cj.metadata.uid, controller: true }],
    },
    spec: template.spec,
  };
}

/// An in-page confirmation before a delete: `button[data-action=delete]`, then
/// `confirm-delete` / `cancel-delete`.
function deleteControl(what, run) {
  const confirm = h('span', { class: 'confirm', hidden: true });
  const del = h('button', {
    type: 'button',
    'data-action': 'delete',
    onclick: () => {
      fill(
        confirm,
        `Delete ${what}? `,
        h('button', { type: 'button', class: 'danger', 'data-action': 'confirm-delete', onclick: () => run() }, 'Delete'),
        h('button', { type: 'button', 'data-action': 'cancel-delete', onclick: () => { confirm.hidden = true; del.hidden = false; del.focus(); } }, 'Keep'),
      );
      confirm.hidden = false;
      del.hidden = true;
      confirm.querySelector('button').focus();
    },
  }, 'Delete');
  return [del, confirm];
}

export function jobs(ctx) {
  const ns = ctx.namespace;
  const actionError = h('p', { id: 'action-error', class: 'error', role: 'alert' });
  const actionInfo = h('p', { id: 'action-result', class: 'info', role: 'status' });
  const act = actionRunner(ctx.main, actionError, actionInfo, () => render());
  const jobPath = (name) => `${api.batch(ns)}/jobs/${enc(name)}`;
  const cronPath = (name) => `${api.batch(ns)}/cronjobs/${enc(name)}`;

  // spec.suspend of a Job or CronJob, decided on the stored object.
  async function setSuspend(path, named, what, suspend) {
    const o = await api.get(path);
    if (!!o.spec.suspend === suspend) throw new Error(`${what} "${o.metadata.name}" is ${suspend ? 'already suspended' : 'not suspended'}`);
    await api.mergePatch(path, { spec: { suspend } });
    return `${named} ${suspend ? 'suspended' : 'resumed'}`;
  }

  const rowButton = (action, label, run) => h('button', { type: 'button', 'data-action': action, onclick: () => act(action, run) }, label);

  const jt = table(
    'jobs',
    [
      { cls: 'name', head: 'Name', text: (j) => j.metadata.name },
      { cls: 'status', head: 'Status', render: (td, j) => phaseBadge(td, jobStatus(j)) },
      { cls: 'completions', head: 'Completions', text: jobCompletions },
      { cls: 'duration', head: 'Duration', render: durationCell },
      { cls: 'owner', head: 'From', text: (j) => (j.metadata.ownerReferences || []).filter((r) => r.kind === 'CronJob').map((r) => `CronJob/${r.name}`).join(', ') || '-' },
      { cls: 'age', head: 'Age', render: (td, j) => ageCell(td, created(j)) },
      {
        cls: 'row-actions',
        head: 'Actions',
        render(td, j, fresh) {
          const name = j.metadata.name;
          const named = `job.batch/${name}`;
          if (fresh) {
            fill(
              td,
              rowButton('suspend', 'Suspend', () => setSuspend(jobPath(name), named, 'job.batch', true)),
              rowButton('resume', 'Resume', () => setSuspend(jobPath(name), named, 'job.batch', false)),
              deleteControl(named, () =>
                act('delete', async () => {
                  await api.del(jobPath(name), { kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Background' });
                  return `${named} deleted`;
                }),
              ),
            );
          }
          const finished = ['Complete', 'Failed'].includes(jobStatus(j));
          td.querySelector('[data-action="suspend"]').hidden = finished || !!j.spec.suspend;
          td.querySelector('[data-action="resume"]').hidden = finished || !j.spec.suspend;
        },
      },
    ],
    'data-job',
  );

  const ct = table(
    'cronjobs',
    [
      { cls: 'name', head: 'Name', text: (c) => c.metadata.name },
      { cls: 'schedule', head: 'Schedule', text: (c) => c.spec.schedule + (c.spec.timeZone ? ` (${c.spec.timeZone})` : '') },
      { cls: 'suspend', head: 'Suspend', text: (c) => (c.spec.suspend ? 'True' : 'False') },
      { cls: 'active', head: 'Active', text: (c) => (c.status?.active || []).length },
      { cls: 'last-schedule', head: 'Last schedule', render: (td, c) => ageCell(td, c.status?.lastScheduleTime) },
      { cls: 'age', head: 'Age', render: (td, c) => ageCell(td, created(c)) },
      {
        cls: 'row-actions',
        head: 'Actions',
        render(td, c, fresh) {
          const name = c.metadata.name;
          const named = `cronjob.batch/${name}`;
          if (fresh) {
            fill(
              td,
              rowButton('run-now', 'Run now', async () => {
                const cj = await api.get(cronPath(name));
                const job = await api.post(`${api.batch(ns)}/jobs`, jobFromCronJob(cj, `${name}-manual-${randomSuffix(5)}`));
                return `job.batch/${job.metadata.name} created`;
              }),
              rowButton('suspend', 'Suspend', () => setSuspend(cronPath(name), named, 'cronjob.batch', true)),
              rowButton('resume', 'Resume', () => setSuspend(cronPath(name), named, 'cronjob.batch', false)),
            );
          }
          td.querySelector('[data-action="suspend"]').hidden = !!c.spec.suspend;
          td.querySelector('[data-action="resume"]').hidden = !c.spec.suspend;
        },
      },
    ],
    'data-cronjob',
  );

  let jobList = [];
  let cronList = [];
  function render() {
    jt.update([...jobList].sort(byName), (j) => j.metadata.name, `No jobs in ${ns}.`);
    ct.update([...cronList].sort(byName), (c) => c.metadata.name, `No cron jobs in ${ns}.`);
  }
  fill(
    ctx.main,
    heading('Jobs', h('a', { class: 'button', href: '#/create' }, 'Create')),
    actionError,
    actionInfo,
    jt.el,
    h('h3', null, 'Cron jobs'),
    ct.el,
  );
  ctx.watch(`${api.batch(ns)}/jobs`, (items) => {
    jobList = items;
    render();
  });
  ctx.watch(`${api.batch(ns)}/cronjobs`, (items) => {
    cronList = items;
    render();
  });
}

// ---- ReplicationControllers ----

export function rcs(ctx) {
  const t = table(
    'rcs',
    [
      { cls: 'name', head: 'Name', text: (rc) => rc.metadata.name },
      {
        cls: 'owner',
        head: 'Config',
        render(td, rc, fresh) {
          const dc = (rc.metadata.labels || {})[CONFIG_LABEL];
          if (fresh) fill(td, dc ? h('a', { href: `#/dcs/${enc(dc)}` }, dc) : '-');
        },
      },
      { cls: 'phase', head: 'Phase', render: (td, rc) => phaseBadge(td, rcPhase(rc)) },
      { cls: 'replicas', head: 'Ready', render: (td, rc) => replicasCell(td, rc.status?.readyReplicas ?? 0, rc.spec.replicas ?? 0, rc.status?.replicas ?? 0) },
      { cls: 'age', head: 'Age', render: (td, rc) => ageCell(td, created(rc)) },
    ],
    'data-rc',
  );
  fill(ctx.main, heading('Replication controllers'), t.el);
  ctx.watch(`${api.ns(ctx.namespace)}/replicationcontrollers`, (items) =>
    t.update(items.sort(byName), (rc) => rc.metadata.name, `No replication controllers in ${ctx.namespace}.`),
  );
}

// ---- Pods ----

function containerState(cs) {
  const s = cs.state || {};
  if (s.running) return `${cs.name}: running`;
  if (s.waiting) return `${cs.name}: waiting (${s.waiting.reason || '?'})`;
  if (s.terminated) return `${cs.name}: terminated (${s.terminated.reason || `exit ${s.terminated.exitCode}`})`;
  return `${cs.name}: unknown`;
}

const podPhase = (pod) => pod.status?.phase || 'Pending';

function containers(pod) {
  const states = (pod.status?.containerStatuses || []).map(containerState);
  if (pod.metadata.deletionTimestamp) states.unshift('terminating');
  return states.join('; ') || '-';
}

// The pod columns both pod tables show.
const podColumns = [
  { cls: 'name', head: 'Name', text: (p) => p.metadata.name },
  { cls: 'phase', head: 'Phase', render: (td, p) => phaseBadge(td, podPhase(p)) },
  {
    cls: 'ready',
    head: 'Ready',
    text: (p) => {
      const cs = p.status?.containerStatuses || [];
      return `${cs.filter((c) => c.ready).length}/${(p.spec.containers || []).length}`;
    },
  },
  { cls: 'restarts', head: 'Restarts', text: (p) => (p.status?.containerStatuses || []).reduce((n, c) => n + (c.restartCount || 0), 0) },
  { cls: 'age', head: 'Age', render: (td, p) => ageCell(td, created(p)) },
  { cls: 'node', head: 'Node', text: (p) => p.spec.nodeName || '-' },
];

export function pods(ctx) {
  const logBox = h('section', { class: 'pod-log', hidden: true });
  let stopLog = null;
  ctx.onLeave(() => stopLog && stopLog());

  function showLog(name, container) {
    if (stopLog) stopLog();
    const pre = h('pre', { id: 'pod-log', class: 'log', tabindex: '0', 'aria-label': `Log of ${name}` });
    const close = h('button', { type: 'button', 'data-action': 'close-log', onclick: () => { if (stopLog) stopLog(); stopLog = null; logBox.hidden = true; fill(logBox); } }, 'Close');
    fill(logBox, h('div', { class: 'view-head' }, h('h3', null, `Log of ${name}${container ? ` (${container})` : ''}`), close), pre);
    logBox.hidden = false;
    const c = container ? `&container=${enc(container)}` : '';
    stopLog = api.follow(
      `${api.ns(ctx.namespace)}/pods/${enc(name)}/log?follow=true&tailLines=500${c}`,
      (text) => {
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(text);
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      },
      (err) => pre.append(err ? `\n[${errorText(err)}]\n` : '\n[end of log]\n'),
    );
    pre.focus({ preventScroll: true });
    logBox.scrollIntoView({ block: 'nearest' });
  }

  const t = table(
    'pods',
    [
      ...podColumns,
      { cls: 'ip', head: 'IP', text: (p) => p.status?.podIP || '-' },
      { cls: 'containers', head: 'Containers', text: containers },
      {
        cls: 'row-actions',
        head: 'Actions',
        render(td, p, fresh) {
          if (!fresh) return;
          const name = p.metadata.name;
          const confirm = h('span', { class: 'confirm', hidden: true });
          const del = h('button', {
            type: 'button',
            'data-action': 'delete-pod',
            onclick: () => {
              fill(
                confirm,
                `Delete ${name}? `,
                h('button', {
                  type: 'button',
                  class: 'danger',
                  'data-action': 'confirm-delete',
                  onclick: async (ev) => {
                    ev.target.disabled = true;
                    try {
                      await api.del(`${api.ns(ctx.namespace)}/pods/${enc(name)}`);
                      setText(confirm, 'deleting…');
                    } catch (e) {
                      setText(confirm, errorText(e));
                      ev.target.disabled = false;
                    }
                  },
                }, 'Delete'),
                h('button', { type: 'button', 'data-action': 'cancel-delete', onclick: () => { confirm.hidden = true; del.hidden = false; del.focus(); } }, 'Keep'),
              );
              confirm.hidden = false;
              del.hidden = true;
              confirm.querySelector('button').focus();
            },
          }, 'Delete');
          const containers = (p.spec.containers || []).map((c) => c.name);
          const logs = h('button', { type: 'button', 'data-action': 'logs', onclick: () => showLog(name, containers.length > 1 ? containers[0] : null) }, 'Logs');
          const edit = h('a', { class: 'button', 'data-action': 'edit', href: `#/edit/api/v1/${enc(ctx.namespace)}/pods/${enc(name)}` }, 'Edit');
          fill(td, logs, edit, del, confirm);
        },
      },
    ],
    'data-pod',
  );
  fill(ctx.main, heading('Pods'), t.el, logBox);
  ctx.watch(`${api.ns(ctx.namespace)}/pods`, (items) => t.update(items.sort(byName), (p) => p.metadata.name, `No pods in ${ctx.namespace}.`));
}

// ---- Events ----

const eventTime = (e) => e.lastTimestamp || e.eventTime || e.firstTimestamp || created(e);

export function events(ctx) {
  const t = table(
    'events',
    [
      { cls: 'type', head: 'Type', render: (td, e) => phaseBadge(td, e.type || 'Normal') },
      { cls: 'reason', head: 'Reason', text: (e) => e.reason || '-' },
      { cls: 'object', head: 'Object', text: (e) => `${e.involvedObject?.kind || '?'}/${e.involvedObject?.name || '?'}` },
      { cls: 'message', head: 'Message', text: (e) => e.message || '' },
      { cls: 'count', head: 'Count', text: (e) => e.count || 1 },
      { cls: 'age', head: 'Last seen', render: (td, e) => ageCell(td, eventTime(e)) },
    ],
    'data-event',
  );
  fill(ctx.main, heading('Events'), t.el);
  ctx.watch(`${api.ns(ctx.namespace)}/events`, (items) => {
    items.sort((a, b) => Date.parse(eventTime(b) || 0) - Date.parse(eventTime(a) || 0) || (Number(b.metadata.resourceVersion) || 0) - (Number(a.metadata.resourceVersion) || 0));
    // The newest 500 are plenty to read; the table stays light.
    t.update(items.slice(0, 500), (e) => e.metadata.name, `No events in ${ctx.namespace}.`);
    for (const tr of t.tbody.children) tr.classList.add('event');
  });
}

// ---- Nodes ----

export function nodes(ctx) {
  const t = table(
    'nodes',
    [
      { cls: 'name', head: 'Name', text: (n) => n.metadata.name },
      {
        cls: 'conditions',
        head: 'Conditions',
        render(td, n) {
          fill(td, (n.status?.conditions || []).map((c) => h('span', { class: 'cond', 'data-type': c.type, 'data-status': c.status, title: c.message || '' }, `${c.type}=${c.status}`)));
        },
      },
      {
        cls: 'capacity',
        head: 'Capacity',
        text: (n) => Object.entries(n.status?.capacity || {}).map(([k, v]) => `${k}: ${v}`).join(', ') || '-',
      },
      { cls: 'version', head: 'Version', text: (n) => n.status?.nodeInfo?.kubeletVersion || '-' },
      { cls: 'age', head: 'Age', render: (td, n) => ageCell(td, created(n)) },
    ],
    'data-node',
  );
  fill(ctx.main, heading('Nodes'), t.el);
  ctx.watch('/api/v1/nodes', (items) => t.update(items.sort(byName), (n) => n.metadata.name, 'No nodes.'));
}

// ---- Create / edit from YAML ----

const EXAMPLE = `apiVersion: apps.openshift.io/v1
kind: DeploymentConfig
metadata:
  name: web
spec:
  replicas: 2
  selector:
    app: web
  triggers:
  - type: ConfigChange
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: busybox
        command: ["sh", "-c", "while true; do sleep 3600; done"]
`;

function statusDetails(e) {
  // Causes the message already names are not repeated.
  const causes = (e.status?.details?.causes || []).filter((c) => !e.message.includes(`${c.field}: ${c.message}`));
  return causes.map((c) => h('li', null, c.field ? h('code', null, c.field) : null, c.field ? ': ' : '', c.message || c.reason || ''));
}

/// `#/create` (no `target`) or `#/edit/<api path>/<namespace>/<resource>/<name>`.
export function editor(ctx, target) {
  const text = h('textarea', { id: 'yaml', spellcheck: 'false', autocomplete: 'off', 'aria-label': 'Object as YAML', rows: '24' });
  const errors = h('div', { id: 'yaml-errors', class: 'error', role: 'alert' });
  const result = h('p', { id: 'yaml-result', class: 'info', role: 'status' });
  const apply = h('button', { type: 'button', id: 'apply', class: 'primary' }, target ? 'Save' : 'Create');
  let objectPath = null;
  if (target) {
    objectPath = `/${target.apiPath}/namespaces/${enc(target.namespace)}/${enc(target.resource)}/${enc(target.name)}`;
    text.value = 'Loading…';
    text.disabled = true;
    api.get(objectPath).then(
      (o) => {
        if (o.metadata) delete o.metadata.managedFields;
        text.value = toYaml(o);
        text.disabled = false;
      },
      (e) => {
        text.value = '';
        text.disabled = false;
        fill(errors, h('p', null, errorText(e)));
      },
    );
  } else {
    text.value = EXAMPLE;
  }

  apply.addEventListener('click', async () => {
    fill(errors);
    setText(result, '');
    apply.disabled = true;
    try {
      const head = header(text.value);
      if (!head.apiVersion || !head.kind) throw new Error('the document needs apiVersion and kind');
      if (!head.name) throw new Error('the document needs metadata.name');
      const res = await api.resourceFor(head.apiVersion, head.kind);
      const prefix = api.apiPrefix(head.apiVersion);
      const namespace = head.namespace || ctx.namespace;
      const collection = res.namespaced ? `${prefix}/namespaces/${enc(namespace)}/${res.name}` : `${prefix}/${res.name}`;
      const contentType = text.value.trim().startsWith('{') ? 'application/json' : 'application/yaml';
      const group = head.apiVersion.includes('/') ? `.${head.apiVersion.split('/')[0]}` : '';
      const what = `${head.kind.toLowerCase()}${group}/${head.name}`;
      if (target) {
        const saved = await api.request('PUT', `${collection}/${enc(head.name)}`, text.value, contentType);
        // The next save starts from the stored version (its new resourceVersion).
        if (saved && saved.metadata) {
          delete saved.metadata.managedFields;
          text.value = toYaml(saved);
        }
        setText(result, `${what} replaced`);
      } else {
        await api.request('POST', collection, text.value, contentType);
        setText(result, `${what} created`);
      }
    } catch (e) {
      fill(errors, h('p', null, errorText(e)), h('ul', null, statusDetails(e)));
    } finally {
      apply.disabled = false;
    }
  });

  const title = target ? `Edit ${target.resource}/${target.name}` : 'Create from YAML';
  fill(
    ctx.main,
    heading(title),
    h('p', { class: 'hint' }, target ? 'Change the object and save: it replaces the stored one (a conflict means someone changed it meanwhile; reload).' : 'Any object berth serves, as YAML or JSON. The namespace defaults to the one picked above.'),
    h('div', { class: 'editor' }, text, h('div', { class: 'editor-side' }, apply, result, errors)),
  );
}
