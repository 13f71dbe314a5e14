// The console's only way to the cluster: berth's API with the bearer token kept in this
// tab's session storage. Lists are kept current by watches (streaming fetch), never polled.

const TOKEN_KEY = 'berth.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/// An answer of the API that was not a success: its status and the Status message.
export class ApiError extends Error {
  constructor(code, status, text) {
    const message = (status && status.message) || text || `HTTP ${code}`;
    super(message);
    this.code = code;
    this.status = status;
  }
}

// Called when the server refuses the token (401): the app shows the sign-in again.
let onUnauthorized = () => {};
export function whenUnauthorized(f) {
  onUnauthorized = f;
}

function headers(extra) {
  return Object.assign({ Authorization: `Bearer ${token()}`, Accept: 'application/json' }, extra || {});
}

async function failure(resp) {
  const text = await resp.text();
  let status = null;
  try {
    status = JSON.parse(text);
  } catch (_) {
    // not JSON: the text is the message
  }
  if (resp.status === 401) onUnauthorized();
  return new ApiError(resp.status, status, text);
}

/// One call; `body` is sent as JSON unless `contentType` says otherwise (then as is).
export async function request(method, path, body, contentType) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers['Content-Type'] = contentType || 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) throw await failure(resp);
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body);
export const put = (path, body) => request('PUT', path, body);
export const del = (path, body) => request('DELETE', path, body);
export const mergePatch = (path, body) => request('PATCH', path, body, 'application/merge-patch+json');
export const jsonPatch = (path, ops) => request('PATCH', path, ops, 'application/json-patch+json');
export const strategicPatch = (path, body) => request('PATCH', path, body, 'application/strategic-merge-patch+json');

/// Whether `t` is a token the server accepts.
export async function check(t) {
  const resp = await fetch('/api', { headers: { Authorization: `Bearer ${t}`, Accept: 'application/json' } });
  if (resp.ok) return null;
  if (resp.status === 401) return 'The server does not accept this token.';
  return `The server answered ${resp.status}.`;
}

// ---- connection state: follows the watches ----

const watches = new Set();
const stateListeners = new Set();

export function onConnection(f) {
  stateListeners.add(f);
  f(connectionState());
}

export function connectionState() {
  let state = 'live';
  for (const w of watches) {
    if (w.state === 'offline') return 'offline';
    if (w.state === 'connecting') state = 'connecting';
  }
  return state;
}

function stateChanged() {
  const s = connectionState();
  for (const f of stateListeners) f(s);
}

async function* lines(body, signal) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line) yield line;
      }
    }
    if (buf.trim()) yield buf.trim();
  } finally {
    if (!signal.aborted) reader.cancel().catch(() => {});
  }
}

const key = (o) => `${o.metadata.namespace || ''}/${o.metadata.name}`;
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

/// A list kept current: lists `path` (a collection URL, optionally with a query), then
/// watches from the list's resourceVersion. A dropped stream re-watches from the last
/// version seen; a 410 (or any ERROR event) re-lists; failures back off up to 15 s.
/// `onChange(items)` gets the objects (an array) after every change.
export class Collection {
  constructor(path, onChange, onError) {
    this.path = path;
    this.onChange = onChange;
    this.onError = onError || (() => {});
    this.items = new Map();
    this.state = 'connecting';
    this.abort = new AbortController();
    this.ready = false;
    watches.add(this);
    stateChanged();
    this.run();
  }

  stop() {
    this.abort.abort();
    watches.delete(this);
    stateChanged();
  }

  setState(s) {
    if (this.state !== s) {
      this.state = s;
      stateChanged();
    }
  }

  emit() {
    this.onChange([...this.items.values()]);
  }

  url(extra) {
    return this.path + (this.path.includes('?') ? '&' : '?') + extra;
  }

  async relist(signal) {
    const resp = await fetch(this.path, { headers: headers(), signal });
    if (!resp.ok) throw await failure(resp);
    const list = await resp.json();
    this.items = new Map((list.items || []).map((o) => [key(o), o]));
    this.ready = true;
    this.onError(null);
    this.emit();
    return list.metadata.resourceVersion;
  }

  // Watches from `rv` until the stream ends; returns the last version seen, or null when
  // the list must be read again.
  async watchFrom(rv, signal) {
    const resp = await fetch(this.url(`watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(rv)}`), {
      headers: headers(),
      signal,
    });
    if (resp.status === 410) return null;
    if (!resp.ok) throw await failure(resp);
    this.setState('live');
    this.liveSince = Date.now();
    for await (const line of lines(resp.body, signal)) {
      const ev = JSON.parse(line);
      if (ev.type === 'ERROR') {
        // 410 Gone: the version is too old to resume from; anything else is a failure.
        if (ev.object && ev.object.code === 410) return null;
        throw new ApiError(ev.object?.code || 500, ev.object, 'the watch failed');
      }
      const o = ev.object;
      if (o && o.metadata && o.metadata.resourceVersion) rv = o.metadata.resourceVersion;
      if (ev.type === 'BOOKMARK') continue;
      if (ev.type === 'DELETED') this.items.delete(key(o));
      else this.items.set(key(o), o);
      this.emit();
    }
    return rv;
  }

  async run() {
    const signal = this.abort.signal;
    let backoff = 500;
    let rv = null;
    while (!signal.aborted) {
      try {
        if (rv === null) rv = await this.relist(signal);
        const started = Date.now();
        rv = await this.watchFrom(rv, signal);
        if (signal.aborted) return;
        // The stream ended (the server's timeout, a proxy): resume from the last version
        // at once after a long stream; streams that keep ending early back off.
        this.setState('connecting');
        if (Date.now() - started > 5000) {
          backoff = 500;
        } else {
          await sleep(backoff, signal);
          backoff = Math.min(backoff * 2, 15000);
        }
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof ApiError && e.code === 401) {
          this.stop();
          return;
        }
        // Refused (403) or absent (404): the connection is fine, the view says why.
        if (e instanceof ApiError && (e.code === 403 || e.code === 404)) {
          this.onError(e);
          this.setState('live');
        } else {
          this.setState('offline');
        }
        rv = null;
        // A stream that had been working a while starts over with a short wait.
        if (this.liveSince && Date.now() - this.liveSince > 5000) backoff = 500;
        this.liveSince = 0;
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 15000);
        if (!signal.aborted) this.setState('connecting');
      }
    }
  }
}

/// Follows a text stream (logs with `follow=true`): `onText(chunk)` for each piece,
/// `onEnd(error|null)` once it ends. Returns a function that stops it.
export function follow(path, onText, onEnd) {
  const abort = new AbortController();
  (async () => {
    try {
      const resp = await fetch(path, { headers: headers({ Accept: '*/*' }), signal: abort.signal });
      if (!resp.ok) throw await failure(resp);
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        onText(decoder.decode(value, { stream: true }));
      }
      onEnd(null);
    } catch (e) {
      if (!abort.signal.aborted) onEnd(e);
    }
  })();
  return () => abort.abort();
}

// ---- resource paths ----

/// The URL prefix of an apiVersion: `/api/v1` or `/apis/GROUP/VERSION`.
export function apiPrefix(apiVersion) {
  return apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
}

const discoveryCache = new Map();

/// The resource (plural name, namespaced) serving `kind` in `apiVersion`, from discovery.
export async function resourceFor(apiVersion, kind) {
  const prefix = apiPrefix(apiVersion);
  if (!discoveryCache.has(prefix)) discoveryCache.set(prefix, get(prefix));
  let list;
  try {
    list = await discoveryCache.get(prefix);
  } catch (e) {
    discoveryCache.delete(prefix);
    throw e;
  }
  const r = (list.resources || []).find((r) => r.kind === kind && !r.name.includes('/'));
  if (!r) throw new Error(`the server has no resource of kind ${kind} in ${apiVersion}`);
  return r;
}

export const ns = (namespace) => `/api/v1/namespaces/${encodeURIComponent(namespace)}`;
export const apps = (namespace) => `/apis/apps.openshift.io/v1/namespaces/${encodeURIComponent(namespace)}`;
export const appsV1 = (namespace) => `/apis/apps/v1/namespaces/${encodeURIComponent(namespace)}`;
export const batch = (namespace) => `/apis/batch/v1/namespaces/${encodeURIComponent(namespace)}`;
export const autoscaling = (namespace) => `/apis/autoscaling/v2/namespaces/${encodeURIComponent(namespace)}`;
