// What the browser tests share: a real `berth serve` on a temporary data directory and a
// random loopback port, the admin token and CA from the kubeconfig it writes, API calls,
// waiting helpers, and headless Chromium driven by playwright-core. Each test file runs in
// its own process (node --test), so each has its own server and `s`.
//
// Environment:
//   BERTH_BIN   the berth binary (default target/debug/berth, relative to the repo)
//   CHROMIUM    the Chromium binary (default /usr/bin/chromium)

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const berthBin = path.resolve(root, process.env.BERTH_BIN || 'target/debug/berth');
const chromiumBin = process.env.CHROMIUM || '/usr/bin/chromium';

// These machines are slow and share their cores: rollouts get minutes, not seconds.
export const ROLLOUT = 240_000;
export const UI = 30_000;

/** Everything the scenarios share; filled by `before`, emptied by `after`. */
export const s = {
  work: null,
  berth: null,
  log: '',
  exited: null,
  server: null,
  token: null,
  ca: null,
  browser: null,
  context: null,
  page: null,
};

// ---------------------------------------------------------------------------------
// The server

export function startBerth(listen = '127.0.0.1:0') {
  s.work ??= fs.mkdtempSync(path.join(os.tmpdir(), 'berth-browser-'));
  const dataDir = path.join(s.work, 'data');
  assert.ok(fs.existsSync(berthBin), `no berth binary at ${berthBin} (build it or set BERTH_BIN)`);
  s.log = '';
  s.berth = spawn(berthBin, ['serve', '--data-dir', dataDir, '--listen', listen, '--default-runtime', 'process'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // Pods share this machine's network: nothing is programmed into it.
    env: { ...process.env, NO_COLOR: '1', BERTH_NO_POD_NETWORK: 'true' },
  });
  s.exited = once(s.berth, 'exit');
  const append = (chunk) => {
    s.log += chunk.toString();
  };
  s.berth.stdout.on('data', append);
  s.berth.stderr.on('data', append);
  return dataDir;
}

export async function waitReady(timeoutMs) {
  // Lines are ANSI-free (NO_COLOR) but strip escapes anyway in case a build colours them.
  const plain = () => s.log.replace(/\x1b\[[0-9;]*m/g, '');
  const deadline = Date.now() + timeoutMs;
  while (!/berth::app: ready\b/.test(plain())) {
    if (!running()) {
      throw new Error(`berth exited before it was ready:\n${plain()}`);
    }
    if (Date.now() > deadline) {
      throw new Error(`berth was not ready within ${timeoutMs} ms:\n${plain()}`);
    }
    await sleep(100);
  }
}

/** Reads server, token and CA from the kubeconfig berth writes into its data dir. */
export function readKubeconfig(dataDir) {
  const text = fs.readFileSync(path.join(dataDir, 'kubeconfig'), 'utf8');
  const field = (name) => {
    const m = text.match(new RegExp(`^\\s*${name}:\\s*(\\S+)\\s*$`, 'm'));
    assert.ok(m, `the kubeconfig has no ${name}:\n${text}`);
    return m[1];
  };
  return {
    server: field('server'),
    token: field('token'),
    ca: Buffer.from(field('certificate-authority-data'), 'base64').toString('utf8'),
  };
}

export const running = () => Boolean(s.berth) && s.berth.exitCode === null && s.berth.signalCode === null;

export async function stopBerth() {
  if (!running()) return;
  s.berth.kill('SIGTERM');
  const timer = setTimeout(() => s.berth.kill('SIGKILL'), 30_000);
  await s.exited;
  clearTimeout(timer);
}

/** One API call with the admin token; resolves to {status, json, text}. */
export function api(method, urlPath, { body, type = 'application/json' } = {}) {
  return new Promise((resolve, reject) => {
    const data =
      body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const headers = { authorization: `Bearer ${s.token}`, accept: 'application/json' };
    if (data !== undefined) {
      headers['content-type'] = type;
      headers['content-length'] = Buffer.byteLength(data);
    }
    const req = https.request(new URL(urlPath, s.server), { method, ca: s.ca, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, json, text });
      });
    });
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${urlPath} timed out`)));
    if (data !== undefined) req.write(data);
    req.end();
  });
}

// ---------------------------------------------------------------------------------
// Helpers

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Retries `check` until it returns a value other than undefined/false, or times out. */
export async function eventually(what, timeoutMs, check) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last?.message ?? last}`);
    }
    await sleep(250);
  }
}

/** Waits until the (first) element of `locator` shows text matching `re`. */
export async function waitText(locator, re, timeoutMs = UI) {
  let seen = '(no element)';
  try {
    await eventually(`${locator} to show ${re}`, timeoutMs, async () => {
      if ((await locator.count()) === 0) {
        seen = '(no element)';
        return false;
      }
      seen = (await locator.first().textContent({ timeout: 1_000 })) ?? '';
      return re.test(seen);
    });
  } catch {
    throw new Error(`${locator} did not show ${re} within ${timeoutMs} ms; it shows ${JSON.stringify(seen)}`);
  }
  return seen;
}

export async function go(route) {
  await s.page.evaluate((r) => {
    window.location.hash = r;
  }, route);
}


/** Starts berth on a fresh data dir and reads its kubeconfig into `s`. */
export async function startServer() {
  const dataDir = startBerth();
  await waitReady(60_000);
  Object.assign(s, readKubeconfig(dataDir));
  return dataDir;
}

/** Headless Chromium with one page in `s.page`; dialogs are counted in `s.dialogs`. */
export async function openBrowser() {
  s.browser = await chromium.launch({ executablePath: chromiumBin, args: ['--no-sandbox'] });
  s.context = await s.browser.newContext({
    ignoreHTTPSErrors: true,
    viewport: { width: 1280, height: 800 },
  });
  s.page = await s.context.newPage();
  s.page.setDefaultTimeout(UI);
  // A dialog would block the page forever: the contract forbids them.
  s.page.on('dialog', (d) => {
    s.dialogs = (s.dialogs ?? 0) + 1;
    d.dismiss().catch(() => {});
  });
}

/** Closes the browser, stops berth (its log shown on failure) and removes the data dir. */
export async function finish() {
  await s.browser?.close().catch(() => {});
  await stopBerth();
  if (process.exitCode && s.log) {
    process.stderr.write(`--- last lines of berth's log ---\n${s.log.split('\n').slice(-40).join('\n')}\n`);
  }
  if (s.work) {
    // The pods berth ran end with it: nothing of the test stays on the machine.
    const reset = spawnSync(berthBin, ['node', 'reset', '--data-dir', path.join(s.work, 'data')], {
      encoding: 'utf8',
    });
    if (reset.status !== 0) process.stderr.write(`berth node reset: ${reset.stderr}\n`);
    fs.rmSync(s.work, { recursive: true, force: true });
  }
}
