// Browser tests of the console's apps/v1 and batch/v1 views (`#/workloads`, a workload's
// detail, `#/jobs`): their own `berth serve` on a temporary data directory and a random
// loopback port (see harness.mjs), objects made through the API, the actions clicked in
// headless Chromium and their effect read back from the API. web/CONTRACT.md names the
// elements used here.
//
// Run: node --test tests/browser/

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ROLLOUT, UI, api, eventually, finish, go, openBrowser, running, s, startServer, waitText } from './harness.mjs';

const NS = 'default';
const APPS = `/apis/apps/v1/namespaces/${NS}`;
const BATCH = `/apis/batch/v1/namespaces/${NS}`;
const HPAS = `/apis/autoscaling/v2/namespaces/${NS}/horizontalpodautoscalers`;
const PODS = `/api/v1/namespaces/${NS}/pods`;
const RESTARTED = 'kubectl.kubernetes.io/restartedAt';
const REVISION = 'deployment.kubernetes.io/revision';

// Images are not pulled: the command runs as it is.
const podSpec = (command = ['sh', '-c', 'exec sleep 86400'], restartPolicy = 'Always') => ({
  terminationGracePeriodSeconds: 1,
  restartPolicy,
  containers: [{ name: 'main', image: 'busybox', command }],
});

const workload = (kind, name, spec = {}) => ({
  apiVersion: 'apps/v1',
  kind,
  metadata: { name },
  spec: {
    selector: { matchLabels: { app: name } },
    template: { metadata: { labels: { app: name } }, spec: podSpec() },
    ...spec,
  },
});

async function create(collection, body) {
  const r = await api('POST', collection, { body });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

async function get(urlPath) {
  const r = await api('GET', urlPath);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

/** Whether a workload's rollout is over: every replica updated and available. */
async function rolledOut(plural, name, replicas) {
  const o = await get(`${APPS}/${plural}/${name}`);
  const st = o.status ?? {};
  return (
    (st.observedGeneration ?? 0) >= o.metadata.generation &&
    st.updatedReplicas === replicas &&
    st.replicas === replicas &&
    st.availableReplicas === replicas
  );
}

/** Clicks an action of the detail page and returns what `#action-result` then says. */
async function action(name, re = /\S/) {
  const page = s.page;
  await page.locator(`.actions button[data-action="${name}"]`).click();
  try {
    return await waitText(page.locator('#action-result'), re);
  } catch (e) {
    const error = await page.locator('#action-error').textContent();
    throw new Error(`${e.message}; #action-error: ${JSON.stringify(error)}`);
  }
}

// ---------------------------------------------------------------------------------
// Set-up and tear-down

before(async () => {
  await startServer();
  await openBrowser();
  await s.page.goto(`${s.server}/console/#token=${s.token}`);
  await s.page.locator('table#dcs').waitFor();
});

after(async () => {
  // Containers outlive berth: delete every workload while berth still runs its pods.
  try {
    if (running() && s.token) {
      const collections = [
        `${APPS}/deployments`,
        `${APPS}/statefulsets`,
        `${APPS}/daemonsets`,
        `${BATCH}/cronjobs`,
        `${BATCH}/jobs`,
        HPAS,
      ];
      for (const c of collections) {
        const list = await api('GET', c);
        for (const o of list.json?.items ?? []) {
          await api('DELETE', `${c}/${o.metadata.name}`, { body: { propagationPolicy: 'Background' } });
        }
      }
      try {
        await eventually('every pod to be gone', 120_000, async () => {
          const pods = await api('GET', PODS);
          return pods.status === 200 && pods.json.items.length === 0;
        });
      } catch (e) {
        const pods = await api('GET', PODS);
        for (const p of pods.json?.items ?? []) {
          await api('DELETE', `${PODS}/${p.metadata.name}`, { body: { gracePeriodSeconds: 0 } });
        }
        await eventually('the pods to be gone', 60_000, async () => {
          const left = await api('GET', PODS);
          return left.status === 200 && left.json.items.length === 0;
        }).catch((e2) => process.stderr.write(`cleanup: ${e2.message}\n`));
        process.stderr.write(`cleanup: ${e.message}\n`);
      }
    }
  } finally {
    await finish();
  }
});

// ---------------------------------------------------------------------------------
// Scenarios, in order: each builds on the state the previous one left.

test('the nav leads to the workloads view, empty at first', async () => {
  const page = s.page;
  await page.locator('.nav a[href="#/jobs"]').waitFor();
  await page.locator('.nav a[href="#/workloads"]').click();
  await page.locator('table#workloads').waitFor();
  await waitText(page.locator('.table-wrap:has(table#workloads) .empty'), /No deployments, stateful sets or daemon sets in default/);
  assert.equal(await page.locator('.nav a[href="#/workloads"]').getAttribute('aria-current'), 'page');
});

test('a Deployment created through the API appears in #/workloads and becomes ready', async () => {
  const page = s.page;
  await create(`${APPS}/deployments`, workload('Deployment', 'web', { replicas: 2 }));
  await go('#/workloads');
  const row = page.locator('table#workloads tr[data-workload="deployments/web"]');
  await row.waitFor();
  await waitText(row.locator('td.kind'), /^\s*Deployment\s*$/);
  await waitText(row.locator('td.replicas'), /^\s*2\s*\/\s*2\b/, ROLLOUT);
  await waitText(row.locator('td.updated'), /^\s*2\s*$/);
  await waitText(row.locator('td.conditions'), /Available/);
  await waitText(row.locator('td.age'), /\d/);
  await row.locator('td.name a[href="#/workloads/deployments/web"]').waitFor();
});

test('undo without history shows the reason in #action-error', async () => {
  const page = s.page;
  await page.locator('table#workloads a[href="#/workloads/deployments/web"]').click();
  await waitText(page.locator('h2'), /^\s*web\s*$/);
  await waitText(page.locator('.summary'), /revision 1\b/);
  await waitText(page.locator('#conditions'), /Available/);
  await waitText(page.locator('table#history tr[data-revision="1"] td.revision'), /1/);
  await waitText(page.locator('table#history tr[data-revision="1"] td.image'), /busybox/);
  await eventually('two pods in #workload-pods', ROLLOUT, async () => (await page.locator('table#workload-pods tbody tr[data-pod]').count()) === 2);
  await waitText(page.locator('table#workload-pods tbody tr[data-pod] td.phase').first(), /Running/, ROLLOUT);
  // A Deployment can be scaled and paused, not resumed while it runs.
  assert.ok(await page.locator('button[data-action="scale-up"]').isVisible());
  assert.ok(await page.locator('button[data-action="pause"]').isVisible());
  assert.ok(await page.locator('button[data-action="resume"]').isHidden());
  assert.equal(await page.locator('#autoscaler').isVisible(), false, 'no autoscaler targets web');
  await page.locator('button[data-action="undo"]').click();
  await waitText(page.locator('#action-error'), /no rollout history found for deployment "web"/);
  assert.equal((await page.locator('#action-result').textContent()).trim(), '');
});

test('scale-up in the detail view makes spec.replicas 3', async () => {
  const page = s.page;
  await action('scale-up', /scaled to 3/);
  assert.equal((await get(`${APPS}/deployments/web`)).spec.replicas, 3);
  assert.equal((await page.locator('#action-error').textContent()).trim(), '');
  await go('#/workloads');
  await waitText(page.locator('table#workloads tr[data-workload="deployments/web"] td.replicas'), /^\s*3\s*\/\s*3\b/, ROLLOUT);
});

test('restart rolls out a second ReplicaSet shown in #history', async () => {
  const page = s.page;
  await go('#/workloads/deployments/web');
  await page.locator('table#history tr[data-revision="1"]').waitFor();
  await action('restart', /restarted/);
  const stamped = (await get(`${APPS}/deployments/web`)).spec.template.metadata.annotations?.[RESTARTED];
  assert.match(stamped ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$/, 'restartedAt is RFC 3339');
  const v2 = page.locator('table#history tr[data-revision="2"]');
  await v2.waitFor({ timeout: ROLLOUT });
  await waitText(v2.locator('td.replicas'), /^\s*3\s*\/\s*3\b/, ROLLOUT);
  await waitText(v2.locator('td.revision'), /current/);
  await eventually('the restart to be rolled out', ROLLOUT, () => rolledOut('deployments', 'web', 3));
});

test("undo to revision 1 writes its template back as revision 3", async () => {
  const page = s.page;
  const undo = page.locator('select#undo-revision');
  await undo.locator('option[value="1"]').waitFor({ state: 'attached' });
  await undo.selectOption('1');
  await action('undo', /rolled back to revision 1/);
  await eventually('revision 3', ROLLOUT, async () => (await get(`${APPS}/deployments/web`)).metadata.annotations?.[REVISION] === '3');
  const d = await get(`${APPS}/deployments/web`);
  assert.equal(d.spec.template.metadata.annotations?.[RESTARTED], undefined, "the template is revision 1's");
  assert.equal(d.spec.template.metadata.labels['pod-template-hash'], undefined, 'the hash label is not written back');
  // Revision 1's ReplicaSet is the one that runs again, now as revision 3.
  const v3 = page.locator('table#history tr[data-revision="3"]');
  await v3.waitFor({ timeout: ROLLOUT });
  await waitText(v3.locator('td.replicas'), /^\s*3\s*\/\s*3\b/, ROLLOUT);
  await eventually('revision 1 to leave #history', UI, async () => (await page.locator('table#history tr[data-revision="1"]').count()) === 0);
  await page.locator('table#history tr[data-revision="2"]').waitFor();
  await eventually('the undo to be rolled out', ROLLOUT, () => rolledOut('deployments', 'web', 3));
});

test('pause then resume flip spec.paused', async () => {
  const page = s.page;
  const paused = async () => Boolean((await get(`${APPS}/deployments/web`)).spec.paused);
  await action('pause', /paused/);
  await eventually('the Deployment to be paused', UI, paused);
  await page.locator('button[data-action="resume"]').waitFor();
  assert.ok(await page.locator('button[data-action="pause"]').isHidden());
  await waitText(page.locator('.summary'), /paused/);
  await go('#/workloads');
  await page.locator('table#workloads tr[data-workload="deployments/web"] td.name .tag').waitFor();
  await go('#/workloads/deployments/web');
  await action('resume', /resumed/);
  await eventually('the Deployment to be resumed', UI, async () => !(await paused()));
  await page.locator('button[data-action="pause"]').waitFor();
});

test("the Edit link opens the Deployment's YAML", async () => {
  const page = s.page;
  await page.locator('a[data-action="edit"]').click();
  assert.equal(new URL(page.url()).hash, '#/edit/apis/apps/v1/default/deployments/web');
  const yaml = page.locator('textarea#yaml');
  await eventually('the YAML to load', UI, async () => /kind: Deployment/.test(await yaml.inputValue()));
  assert.match(await yaml.inputValue(), /name: web/);
});

test("a StatefulSet's detail shows its ControllerRevisions, pods and autoscaler", async () => {
  const page = s.page;
  await create(`${APPS}/statefulsets`, workload('StatefulSet', 'db', { replicas: 1, serviceName: 'db' }));
  // Held at one replica: the autoscaler is only shown, it has nothing to change.
  await create(HPAS, {
    apiVersion: 'autoscaling/v2',
    kind: 'HorizontalPodAutoscaler',
    metadata: { name: 'db' },
    spec: {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'db' },
      minReplicas: 1,
      maxReplicas: 1,
      metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 50 } } }],
    },
  });
  await go('#/workloads');
  const row = page.locator('table#workloads tr[data-workload="statefulsets/db"]');
  await waitText(row.locator('td.kind'), /StatefulSet/);
  await waitText(row.locator('td.replicas'), /^\s*1\s*\/\s*1\b/, ROLLOUT);
  await row.locator('a[href="#/workloads/statefulsets/db"]').click();
  await waitText(page.locator('h2'), /^\s*db\s*$/);
  const revisions = (await get(`${APPS}/controllerrevisions`)).items.filter((r) => r.metadata.ownerReferences?.some((o) => o.kind === 'StatefulSet' && o.name === 'db'));
  assert.equal(revisions.length, 1);
  const v1 = page.locator('table#history tr[data-revision="1"]');
  await waitText(v1.locator('td.name'), new RegExp(`^\\s*${revisions[0].metadata.name}\\s*$`));
  await waitText(v1.locator('td.image'), /busybox/);
  await waitText(page.locator('table#workload-pods tr[data-pod="db-0"] td.phase'), /Running/, ROLLOUT);
  await waitText(page.locator('table#workload-pods tr[data-pod="db-0"] td.ready'), /1\/1/, ROLLOUT);
  assert.ok(await page.locator('button[data-action="pause"]').isHidden(), 'no pause for a StatefulSet');
  assert.ok(await page.locator('button[data-action="resume"]').isHidden(), 'no resume for a StatefulSet');
  assert.ok(await page.locator('button[data-action="scale-up"]').isVisible(), 'a StatefulSet scales');
  const hpa = page.locator('#autoscaler li[data-hpa="db"]');
  await waitText(hpa.locator('.min-max'), /min 1, max 1/);
  await waitText(hpa.locator('.targets'), /^cpu: \S+\/50%$/);
  await waitText(hpa.locator('.hpa-replicas'), /1 current/, ROLLOUT);
  // A restart is a second revision; undo writes the first one's template back (revision 3).
  await action('restart', /restarted/);
  await page.locator('table#history tr[data-revision="2"]').waitFor({ timeout: ROLLOUT });
  await eventually('the restart to be rolled out', ROLLOUT, () => rolledOut('statefulsets', 'db', 1));
  await action('undo', /rolled back to revision 1/);
  await page.locator('table#history tr[data-revision="3"]').waitFor({ timeout: ROLLOUT });
  const sts = await get(`${APPS}/statefulsets/db`);
  assert.equal(sts.spec.template.metadata.annotations?.[RESTARTED], undefined, "the template is revision 1's");
});

test('a DaemonSet is listed with its scheduled pods and cannot be scaled or paused', async () => {
  const page = s.page;
  await create(`${APPS}/daemonsets`, workload('DaemonSet', 'agent'));
  await go('#/workloads');
  const row = page.locator('table#workloads tr[data-workload="daemonsets/agent"]');
  await waitText(row.locator('td.kind'), /DaemonSet/);
  await waitText(row.locator('td.replicas'), /^\s*1\s*\/\s*1\b/, ROLLOUT);
  await waitText(row.locator('td.updated'), /^\s*1\s*$/);
  await row.locator('a[href="#/workloads/daemonsets/agent"]').click();
  await waitText(page.locator('h2'), /^\s*agent\s*$/);
  await page.locator('table#history tr[data-revision="1"]').waitFor();
  await eventually('one pod of agent', ROLLOUT, async () => (await page.locator('table#workload-pods tbody tr[data-pod]').count()) === 1);
  for (const a of ['scale-up', 'scale-down', 'pause', 'resume']) {
    assert.ok(await page.locator(`button[data-action="${a}"]`).isHidden(), `no ${a} for a DaemonSet`);
  }
  assert.ok(await page.locator('button[data-action="restart"]').isVisible());
});

test('a Job that runs `true` shows Complete in #/jobs', async () => {
  const page = s.page;
  await create(`${BATCH}/jobs`, {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name: 'once' },
    spec: { template: { spec: podSpec(['true'], 'Never') } },
  });
  await page.locator('.nav a[href="#/jobs"]').click();
  const row = page.locator('table#jobs tr[data-job="once"]');
  await waitText(row.locator('td.status'), /^\s*Complete\s*$/, ROLLOUT);
  await waitText(row.locator('td.completions'), /^\s*1\/1\s*$/);
  await waitText(row.locator('td.duration'), /^\s*\d+[smhd]\s*$/);
  await waitText(row.locator('td.age'), /\d/);
  // A finished Job has nothing to suspend.
  assert.ok(await row.locator('button[data-action="suspend"]').isHidden());
});

test('a running Job is suspended, resumed and deleted in-page', async () => {
  const page = s.page;
  await create(`${BATCH}/jobs`, {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name: 'sleeper' },
    spec: { template: { spec: podSpec(undefined, 'Never') } },
  });
  await go('#/jobs');
  const row = page.locator('table#jobs tr[data-job="sleeper"]');
  const suspended = async () => Boolean((await get(`${BATCH}/jobs/sleeper`)).spec.suspend);
  await waitText(row.locator('td.status'), /Running/);
  await row.locator('button[data-action="suspend"]').click();
  await waitText(page.locator('#action-result'), /job\.batch\/sleeper suspended/);
  await eventually('the Job to be suspended', UI, suspended);
  await waitText(row.locator('td.status'), /Suspended/, ROLLOUT);
  await row.locator('button[data-action="resume"]').click();
  await waitText(page.locator('#action-result'), /job\.batch\/sleeper resumed/);
  await eventually('the Job to be resumed', UI, async () => !(await suspended()));
  await waitText(row.locator('td.status'), /Running/, ROLLOUT);
  await row.locator('button[data-action="delete"]').click();
  await row.locator('button[data-action="confirm-delete"]').click();
  await waitText(page.locator('#action-result'), /job\.batch\/sleeper deleted/);
  await eventually('the Job to be gone', UI, async () => (await api('GET', `${BATCH}/jobs/sleeper`)).status === 404);
  await eventually('the row of sleeper to leave the list', UI, async () => (await row.count()) === 0);
  assert.equal(s.dialogs ?? 0, 0, 'the console opened a window.confirm/prompt');
});

test("a CronJob's run-now creates a Job as kubectl create job --from does", async () => {
  const page = s.page;
  const cj = await create(`${BATCH}/cronjobs`, {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name: 'tick' },
    spec: {
      schedule: '0 0 1 1 *',
      jobTemplate: {
        metadata: { labels: { from: 'tick' }, annotations: { note: 'by hand' } },
        spec: { template: { spec: podSpec(['true'], 'Never') } },
      },
    },
  });
  await go('#/jobs');
  const row = page.locator('table#cronjobs tr[data-cronjob="tick"]');
  await waitText(row.locator('td.schedule'), /^\s*0 0 1 1 \*\s*$/);
  await waitText(row.locator('td.suspend'), /False/);
  await waitText(row.locator('td.active'), /^\s*0\s*$/);
  await waitText(row.locator('td.last-schedule'), /^\s*-\s*$/);
  await row.locator('button[data-action="run-now"]').click();
  const said = await waitText(page.locator('#action-result'), /job\.batch\/\S+ created/);
  const name = said.match(/job\.batch\/(\S+) created/)[1];
  assert.match(name, /^tick-manual-[a-z0-9]{5}$/);
  const job = await get(`${BATCH}/jobs/${name}`);
  assert.equal(job.metadata.annotations['cronjob.kubernetes.io/instantiate'], 'manual');
  assert.equal(job.metadata.annotations.note, 'by hand');
  assert.equal(job.metadata.labels.from, 'tick');
  const owner = job.metadata.ownerReferences?.[0];
  assert.deepEqual(
    { kind: owner?.kind, name: owner?.name, uid: owner?.uid, controller: owner?.controller },
    { kind: 'CronJob', name: 'tick', uid: cj.metadata.uid, controller: true },
  );
  const jobRow = page.locator(`table#jobs tr[data-job="${name}"]`);
  await waitText(jobRow.locator('td.owner'), /CronJob\/tick/);
  await waitText(jobRow.locator('td.status'), /Complete/, ROLLOUT);
  // Suspend and resume flip spec.suspend.
  await row.locator('button[data-action="suspend"]').click();
  await waitText(row.locator('td.suspend'), /True/);
  assert.equal((await get(`${BATCH}/cronjobs/tick`)).spec.suspend, true);
  await row.locator('button[data-action="resume"]').click();
  await waitText(row.locator('td.suspend'), /False/);
  assert.equal((await get(`${BATCH}/cronjobs/tick`)).spec.suspend, false);
});
