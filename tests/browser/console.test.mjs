// Browser tests of berth's web console: a real `berth serve` with a temporary data
// directory, driven through headless Chromium by playwright-core (see harness.mjs). The
// console's DOM contract (ids, data attributes, routes) is what these tests rely on.
//
// Environment:
//   BERTH_BIN         the berth binary (default target/debug/berth, relative to the repo)
//   CHROMIUM          the Chromium binary (default /usr/bin/chromium)
//   BERTH_SCREENSHOT  1 = write the DC overview to web/screenshots/overview.png
//
// Run: node --test tests/browser/

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  ROLLOUT,
  UI,
  api,
  eventually,
  finish,
  go,
  openBrowser,
  root,
  running,
  s,
  startBerth,
  startServer,
  stopBerth,
  waitReady,
  waitText,
} from './harness.mjs';

const screenshot = process.env.BERTH_SCREENSHOT === '1';

const NS = 'default';
const DC = 'web';
const DCS = `/apis/apps.openshift.io/v1/namespaces/${NS}/deploymentconfigs`;
const RCS = `/api/v1/namespaces/${NS}/replicationcontrollers`;
const PODS = `/api/v1/namespaces/${NS}/pods`;

const DC_YAML = `apiVersion: apps.openshift.io/v1
kind: DeploymentConfig
metadata:
  name: ${DC}
spec:
  replicas: 2
  selector:
    app: ${DC}
  strategy:
    type: Rolling
  triggers:
  - type: ConfigChange
  template:
    metadata:
      labels:
        app: ${DC}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "exec sleep 86400"]
`;

// A DeploymentConfig the server rejects: its selector does not match its template.
const INVALID_YAML = `apiVersion: apps.openshift.io/v1
kind: DeploymentConfig
metadata:
  name: broken
spec:
  replicas: 1
  selector:
    app: broken
  template:
    metadata:
      labels:
        app: something-else
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "exec sleep 86400"]
`;

// ---------------------------------------------------------------------------------
// Helpers

/** The RC of the latest version of the DC, from the API. */
async function latestRc() {
  const dc = await api('GET', `${DCS}/${DC}`);
  assert.equal(dc.status, 200, dc.text);
  const version = dc.json.status?.latestVersion ?? 0;
  const rc = await api('GET', `${RCS}/${DC}-${version}`);
  return { dc: dc.json, version, rc: rc.status === 200 ? rc.json : null };
}

const phaseOf = (rc) => rc?.metadata?.annotations?.['openshift.io/deployment.phase'] ?? '';

// ---------------------------------------------------------------------------------
// Set-up and tear-down

before(async () => {
  await startServer();
  await openBrowser();
});

after(async () => {
  // Containers outlive berth: remove the DC and every pod while berth still runs them.
  try {
    if (running() && s.token) {
      await api('DELETE', `${DCS}/${DC}`, { body: { propagationPolicy: 'Foreground' } });
      try {
        await eventually('the DC, its RCs and pods to be gone', 120_000, async () => {
          const pods = await api('GET', PODS);
          const rcs = await api('GET', RCS);
          if (pods.status !== 200 || rcs.status !== 200) return false;
          return pods.json.items.length + rcs.json.items.length === 0;
        });
      } catch (e) {
        // Whatever is left goes now, pods one by one.
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

test('the root redirects a browser to the console', async () => {
  const res = await s.page.goto(`${s.server}/`);
  assert.ok(res, 'no response');
  assert.match(new URL(s.page.url()).pathname, /^\/console\/?/);
});

test('a bad token is refused and the admin token signs in', async () => {
  const page = s.page;
  await page.goto(`${s.server}/console/`);
  await page.locator('input#token').fill('not-a-token');
  await page.locator('button#sign-in').click();
  await waitText(page.locator('#sign-in-error'), /\S/);
  await page.locator('input#token').fill(s.token);
  await page.locator('button#sign-in').click();
  await page.locator('table#dcs').waitFor();
  // The default route: no hash at all, or #/dcs.
  assert.match(new URL(page.url()).hash, /^(#\/dcs)?$/, 'the default route is #/dcs');
  const stored = await page.evaluate(() => sessionStorage.getItem('berth.token'));
  assert.equal(stored, s.token, 'the token is kept in sessionStorage');
  await page.locator('button#sign-out').waitFor();
});

test('a #token= URL signs in and leaves the address bar', async () => {
  const other = await s.context.newPage();
  try {
    await other.goto(`${s.server}/console/#token=${s.token}`);
    await other.locator('table#dcs').waitFor({ timeout: UI });
    await eventually('the token to leave the address bar', UI, async () => !other.url().includes(s.token));
    assert.equal(await other.evaluate(() => sessionStorage.getItem('berth.token')), s.token);
    await other.locator('button#sign-out').click();
    await other.locator('input#token').waitFor();
    assert.equal(await other.evaluate(() => sessionStorage.getItem('berth.token')), null);
  } finally {
    await other.close();
  }
});

test('the connection indicator is live', async () => {
  const conn = s.page.locator('#connection');
  await eventually('#connection[data-state=live]', UI, async () => (await conn.getAttribute('data-state')) === 'live');
  await waitText(conn, /live/i);
  assert.ok((await s.page.locator('select#namespace option').count()) > 0, 'the namespace picker lists namespaces');
});

test("a YAML with a validation error shows the server's message", async () => {
  const page = s.page;
  // What the server says about this YAML, asked directly.
  const direct = await api('POST', DCS, { body: INVALID_YAML, type: 'application/yaml' });
  assert.equal(direct.status, 422, direct.text);
  const message = direct.json.message;
  await go('#/create');
  await page.locator('textarea#yaml').fill(INVALID_YAML);
  await page.locator('button#apply').click();
  const shown = await waitText(page.locator('#yaml-errors'), /\S/);
  assert.ok(shown.includes(message), `#yaml-errors shows ${JSON.stringify(shown)}, the server said ${JSON.stringify(message)}`);
  assert.equal((await api('GET', `${DCS}/broken`)).status, 404);
});

test('a DC created from YAML rolls out to Complete on the overview', async () => {
  const page = s.page;
  await go('#/create');
  await page.locator('textarea#yaml').fill(DC_YAML);
  await page.locator('button#apply').click();
  await waitText(page.locator('#yaml-result'), /deploymentconfig\.apps\.openshift\.io\/web created/);
  await go('#/dcs');
  const row = page.locator(`table#dcs tr[data-dc="${DC}"]`);
  await row.waitFor();
  await waitText(row.locator('td.phase'), /^\s*Complete\s*$/, ROLLOUT);
  await waitText(row.locator('td.version'), /^\s*1\s*$/);
  await waitText(row.locator('td.replicas'), /^\s*2\s*\/\s*2\b/, ROLLOUT);
  await waitText(row.locator('td.trigger'), /config/i);
  await waitText(row.locator('td.age'), /\d/);
  await row.locator(`a[href="#/dcs/${DC}"]`).waitFor();
  if (screenshot) {
    const file = path.join(root, 'web', 'screenshots', 'overview.png');
    fs.mkdirSync(path.dirname(file), { recursive: true });
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.screenshot({ path: file });
  }
});

test('the DC scales up from its detail page', async () => {
  const page = s.page;
  await page.locator(`table#dcs tr[data-dc="${DC}"] a[href="#/dcs/${DC}"]`).click();
  await waitText(page.locator('h2'), new RegExp(`\\b${DC}\\b`));
  await page.locator('#conditions').waitFor();
  await waitText(page.locator('table#history tr[data-version="1"] td.phase'), /Complete/);
  await page.locator('button[data-action="scale-up"]').click();
  await eventually('spec.replicas to be 3', UI, async () => (await api('GET', `${DCS}/${DC}`)).json?.spec?.replicas === 3);
  await go('#/dcs');
  await waitText(page.locator(`table#dcs tr[data-dc="${DC}"] td.replicas`), /^\s*3\s*\/\s*3\b/, ROLLOUT);
});

test('deploy latest rolls out version 2 with its deployer log', async () => {
  const page = s.page;
  await go(`#/dcs/${DC}`);
  await page.locator('button[data-action="deploy"]').click();
  const history = page.locator('table#history tr[data-version="2"]');
  await history.waitFor({ timeout: ROLLOUT });
  await waitText(history.locator('td.phase'), /Complete/, ROLLOUT);
  await waitText(history.locator('td.cause'), /\S/);
  await waitText(page.locator('pre#deployer-log'), /Scaling up web-2/, ROLLOUT);
  assert.equal((await latestRc()).version, 2);
  const error = page.locator('#action-error');
  if ((await error.count()) > 0) assert.equal((await error.textContent()).trim(), '', 'no action failed');
});

test('a rollout that cannot finish is cancelled and its phase is Failed', async () => {
  const page = s.page;
  // A readiness probe that always fails: version 3 cannot become available. The
  // ConfigChange trigger starts it.
  const patch = await api('PATCH', `${DCS}/${DC}`, {
    type: 'application/strategic-merge-patch+json',
    body: {
      spec: {
        template: {
          spec: {
            containers: [
              { name: 'main', readinessProbe: { exec: { command: ['false'] }, periodSeconds: 1 } },
            ],
          },
        },
      },
    },
  });
  assert.equal(patch.status, 200, patch.text);
  await go(`#/dcs/${DC}`);
  const v3 = page.locator('table#history tr[data-version="3"]');
  await v3.waitFor({ timeout: ROLLOUT });
  await waitText(v3.locator('td.phase'), /Running/, ROLLOUT);
  await page.locator('button[data-action="cancel"]').click();
  await waitText(v3.locator('td.phase'), /Failed/, ROLLOUT);
  const { version, rc } = await latestRc();
  assert.equal(version, 3);
  assert.equal(phaseOf(rc), 'Failed');
  assert.equal(rc.metadata.annotations['openshift.io/deployment.cancelled'], 'true');
  await go('#/dcs');
  await waitText(page.locator(`table#dcs tr[data-dc="${DC}"] td.phase`), /Failed/);
});

test('events stream in, newest first', async () => {
  const page = s.page;
  await go('#/events');
  const rows = page.locator('table#events tr.event');
  const cancelled = rows.filter({ has: page.locator('td.reason', { hasText: 'RolloutCancelled' }) });
  await waitText(cancelled.locator('td.object'), /DeploymentConfig\/web/);
  await waitText(cancelled.locator('td.message'), /"default\/web-3" cancelled/);
  const created = rows.filter({ has: page.locator('td.message', { hasText: '"web-1" for version 1' }) });
  await waitText(created.locator('td.reason'), /DeploymentCreated/);
  await waitText(created.locator('td.object'), /DeploymentConfig\/web/);
  await waitText(created.locator('td.type'), /Normal/);
  const order = await rows.evaluateAll((trs) =>
    trs.map((tr) => `${tr.querySelector('td.reason')?.textContent}|${tr.querySelector('td.message')?.textContent}`),
  );
  const iCancelled = order.findIndex((r) => r.startsWith('RolloutCancelled'));
  const iCreated = order.findIndex((r) => r.includes('"web-1" for version 1'));
  assert.ok(iCancelled < iCreated, `the newest event comes first: ${JSON.stringify(order)}`);
});

test('a pod is deleted from the pod list', async () => {
  const page = s.page;
  await go('#/pods');
  const pods = await api('GET', `${PODS}?labelSelector=${encodeURIComponent(`deployment=${DC}-2`)}`);
  const running = (pods.json?.items ?? []).filter((p) => p.status?.phase === 'Running' && !p.metadata.deletionTimestamp);
  assert.ok(running.length > 0, `no running pod of ${DC}-2: ${pods.text}`);
  const name = running[0].metadata.name;
  const row = page.locator(`table#pods tr[data-pod="${name}"]`);
  await waitText(row.locator('td.phase'), /Running/);
  await waitText(row.locator('td.ready'), /\d/);
  await waitText(row.locator('td.restarts'), /\d/);
  await waitText(row.locator('td.node'), /\S/);
  await waitText(row.locator('td.ip'), /\S/);
  await row.locator('button[data-action="delete-pod"]').click();
  // The contract asks for an in-page confirmation without naming it: take the control
  // that appears in the row or a dialog element once the delete button was pressed.
  const gone = async () => {
    const p = await api('GET', `${PODS}/${name}`);
    return p.status === 404 || Boolean(p.json?.metadata?.deletionTimestamp);
  };
  await eventually(`pod ${name} to be deleted`, UI, async () => {
    if (await gone()) return true;
    const confirm = page
      .locator(
        `table#pods tr[data-pod="${name}"] button:not([data-action="delete-pod"]):not([data-action="logs"]), dialog[open] button, [role="dialog"] button, [role="alertdialog"] button`,
      )
      .filter({ hasText: /confirm|delete|yes/i });
    if ((await confirm.count()) > 0) await confirm.first().click({ timeout: 2_000 });
    return false;
  });
  await eventually(`the row of ${name} to leave the list`, ROLLOUT, async () => (await row.count()) === 0);
  assert.equal(s.dialogs ?? 0, 0, 'the console opened a window.confirm/prompt');
});

test('a pod log tail follows', async () => {
  const page = s.page;
  await go('#/pods');
  const deployer = page.locator(`table#pods tr[data-pod="${DC}-2-deploy"]`);
  await deployer.waitFor({ timeout: UI });
  await deployer.locator('button[data-action="logs"]').click();
  await waitText(page.locator('pre#pod-log'), /Scaling up web-2/);
});

test('pause and resume, then undo to revision 1 rolls out version 4', async () => {
  const page = s.page;
  const paused = async () => Boolean((await api('GET', `${DCS}/${DC}`)).json?.spec?.paused);
  await go(`#/dcs/${DC}`);
  await page.locator('button[data-action="pause"]').click();
  await eventually('the DC to be paused', UI, paused);
  await page.locator('button[data-action="resume"]').click();
  await eventually('the DC to be resumed', UI, async () => !(await paused()));
  // Version 1's template has no failing readiness probe: rolling back to it completes.
  const undo = page.locator('select#undo-revision');
  await undo.locator('option[value="1"]').waitFor({ state: 'attached' });
  await undo.selectOption('1');
  await page.locator('button[data-action="undo"]').click();
  const v4 = page.locator('table#history tr[data-version="4"]');
  await v4.waitFor({ timeout: ROLLOUT });
  await waitText(v4.locator('td.phase'), /Complete/, ROLLOUT);
  const dc = (await api('GET', `${DCS}/${DC}`)).json;
  assert.equal(dc.status.latestVersion, 4);
  assert.equal(dc.spec.template.spec.containers[0].readinessProbe, undefined, 'the template is version 1\'s');
});

test('the RC, node and namespace views list what the API has', async () => {
  const page = s.page;
  await go('#/rcs');
  for (const v of [1, 2, 3]) await page.locator(`table#rcs tr[data-rc="${DC}-${v}"]`).waitFor();
  const nodes = await api('GET', '/api/v1/nodes');
  assert.equal(nodes.status, 200, nodes.text);
  const node = nodes.json.items[0].metadata.name;
  await go('#/nodes');
  await waitText(page.locator(`table#nodes tr[data-node="${node}"]`), /Ready/);
  // The namespace picker follows namespaces as they come.
  const made = await api('POST', '/api/v1/namespaces', {
    body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'console-picker' } },
  });
  assert.equal(made.status, 201, made.text);
  try {
    await page.locator('select#namespace option[value="console-picker"]').waitFor({ state: 'attached' });
  } finally {
    await api('DELETE', '/api/v1/namespaces/console-picker');
  }
});

test('a restart of berth shows offline, then live again, and later changes arrive', async () => {
  const page = s.page;
  await go('#/dcs');
  const conn = page.locator('#connection');
  const state = () => conn.getAttribute('data-state');
  await eventually('#connection live before the restart', UI, async () => (await state()) === 'live');
  await stopBerth();
  await eventually('#connection not live while berth is down', UI, async () => (await state()) !== 'live');
  // The same data directory and address: the page's URL and token stay valid.
  startBerth(new URL(s.server).host);
  await waitReady(60_000);
  await eventually('#connection live after the restart', 120_000, async () => (await state()) === 'live');
  // The watches were started again: an object made now shows up without a reload.
  const made = await api('POST', '/api/v1/namespaces', {
    body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'after-restart' } },
  });
  assert.equal(made.status, 201, made.text);
  try {
    await page.locator('select#namespace option[value="after-restart"]').waitFor({ state: 'attached' });
  } finally {
    await api('DELETE', '/api/v1/namespaces/after-restart');
  }
  await page.locator(`table#dcs tr[data-dc="${DC}"]`).waitFor();
});

test('at 360 px wide the DC table fits the page', async () => {
  const page = s.page;
  await page.setViewportSize({ width: 360, height: 740 });
  try {
    await go('#/dcs');
    const row = page.locator(`table#dcs tr[data-dc="${DC}"]`);
    await row.waitFor();
    assert.ok(await row.isVisible(), 'the DC row is visible');
    const { scrollWidth, clientWidth } = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      clientWidth: document.documentElement.clientWidth,
    }));
    assert.ok(scrollWidth <= clientWidth, `the page overflows sideways: ${scrollWidth} > ${clientWidth} px`);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
});
