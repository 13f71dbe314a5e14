// The console's shell: sign-in, the header (namespace picker, connection state), and a
// hash router over the views. Every view's data comes from watches opened for it.

import * as api from './api.js';
import { h, fill, setText } from './dom.js';
import * as views from './views.js';

const NS_KEY = 'berth.namespace';
const $ = (id) => document.getElementById(id);

let namespace = sessionStorage.getItem(NS_KEY) || 'default';
let leave = [];
let namespaces = null;

// ---- sign-in ----

function showSignIn(message) {
  stopView();
  if (namespaces) namespaces.stop();
  namespaces = null;
  $('shell').hidden = true;
  $('signin').hidden = false;
  setText($('sign-in-error'), message || '');
  $('token').focus();
}

async function signIn(t) {
  const problem = await api.check(t).catch((e) => `The server cannot be reached: ${e.message}`);
  if (problem) {
    api.setToken(null);
    showSignIn(problem);
    return;
  }
  api.setToken(t);
  $('token').value = '';
  start();
}

function signOut() {
  api.setToken(null);
  showSignIn('');
}

api.whenUnauthorized(() => {
  if (api.token()) {
    api.setToken(null);
    showSignIn('The token was refused; sign in again.');
  }
});

// ---- header ----

function renderNamespaces(items) {
  const select = $('namespace');
  const names = items.map((n) => n.metadata.name).sort();
  if (!names.includes(namespace)) names.push(namespace);
  names.sort();
  const current = [...select.options].map((o) => o.value).join('\n');
  if (current !== names.join('\n')) fill(select, names.map((n) => h('option', { value: n }, n)));
  select.value = namespace;
}

function showConnection(state) {
  const el = $('connection');
  el.dataset.state = state;
  setText(el, state);
  el.title = { live: 'watching the cluster live', connecting: 'connecting to the cluster', offline: 'the cluster cannot be reached; retrying' }[state];
}

// ---- router ----

// A list the view needs could not be read (e.g. the token may not list it): said on top.
function showProblem(path, e) {
  let box = document.getElementById('view-problem');
  if (!e) {
    if (box && box.dataset.path === path) box.remove();
    return;
  }
  if (!box) {
    box = h('p', { id: 'view-problem', class: 'error', role: 'alert' });
    $('main').prepend(box);
  }
  box.dataset.path = path;
  setText(box, `Cannot read ${path}: ${e.message}`);
}

function stopView() {
  for (const f of leave) f();
  leave = [];
}

function route() {
  if (!api.token()) return;
  const hash = location.hash || '#/dcs';
  stopView();
  const main = $('main');
  const ctx = {
    main,
    namespace,
    watch(path, f) {
      const c = new api.Collection(path, f, (e) => showProblem(path, e));
      leave.push(() => c.stop());
      return c;
    },
    onLeave(f) {
      leave.push(f);
    },
  };
  const parts = hash.slice(2).split('/').map(decodeURIComponent);
  for (const a of document.querySelectorAll('.nav a')) {
    if (a.getAttribute('href') === `#/${parts[0]}` || (parts[0] === 'edit' && a.getAttribute('href') === '#/create')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  switch (parts[0]) {
    case 'dcs':
      if (parts[1]) views.dcDetail(ctx, parts[1]);
      else views.dcs(ctx);
      break;
    case 'workloads':
      if (parts[1] && parts[2]) views.workloadDetail(ctx, parts[1], parts[2]);
      else views.workloads(ctx);
      break;
    case 'jobs':
      views.jobs(ctx);
      break;
    case 'rcs':
      views.rcs(ctx);
      break;
    case 'pods':
      views.pods(ctx);
      break;
    case 'events':
      views.events(ctx);
      break;
    case 'nodes':
      views.nodes(ctx);
      break;
    case 'create':
      views.editor(ctx, null);
      break;
    case 'edit': {
      // edit/<api path…>/<namespace>/<resource>/<name>
      const rest = parts.slice(1);
      if (rest.length < 5) {
        fill(main, h('p', { class: 'error' }, 'This edit link is incomplete.'));
        break;
      }
      const [ns, resource, name] = rest.slice(-3);
      views.editor(ctx, { apiPath: rest.slice(0, -3).join('/'), namespace: ns, resource, name });
      break;
    }
    default:
      location.replace('#/dcs');
  }
}

function start() {
  $('signin').hidden = true;
  $('shell').hidden = false;
  if (!namespaces) namespaces = new api.Collection('/api/v1/namespaces', renderNamespaces);
  route();
}

// ---- start-up ----

document.addEventListener('DOMContentLoaded', () => {
  api.onConnection(showConnection);
  $('sign-in-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    if (t) signIn(t);
  });
  $('sign-out').addEventListener('click', signOut);
  // The skip link moves the focus; it must not become a route.
  document.querySelector('.skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    $('main').focus();
  });
  $('namespace').addEventListener('change', (ev) => {
    namespace = ev.target.value;
    sessionStorage.setItem(NS_KEY, namespace);
    // A detail or edit page belongs to the old namespace: go to its list.
    const detail = /^#\/(dcs|workloads|edit)\//.exec(location.hash);
    if (detail) location.hash = detail[1] === 'workloads' ? '#/workloads' : '#/dcs';
    else route();
  });
  window.addEventListener('hashchange', () => {
    if (location.hash.startsWith('#token=')) return takeTokenFromUrl();
    route();
  });
  if (!takeTokenFromUrl()) {
    if (api.token()) start();
    else showSignIn('');
  }
});

/// `#token=XYZ`: sign in with XYZ and take it out of the address bar (and history).
function takeTokenFromUrl() {
  const m = /^#token=([^&]*)/.exec(location.hash);
  if (!m) return false;
  const t = decodeURIComponent(m[1]);
  history.replaceState(null, '', `${location.pathname}${location.search}#/dcs`);
  signIn(t);
  return true;
}
