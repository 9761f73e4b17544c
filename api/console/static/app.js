import { h, clear, errorBox } from './dom.js';
import * as api from './api.js';
import { overviewPage } from './pages/overview.js';
import { jobsPage, jobPage, deadLettersPage } from './pages/jobs.js';
import { credentialsPage } from './pages/credentials.js';
import { alertsPage } from './pages/alerts.js';
import { subscriptionsPage, subscriptionPage, eventsPage, eventPage } from './pages/events.js';

const app = document.getElementById('app');

const nav = [
  { path: 'overview', label: 'Overview', page: overviewPage },
  { path: 'jobs', label: 'Jobs', page: jobsPage },
  { path: 'dead-letters', label: 'Dead letters', page: deadLettersPage },
  { path: 'events', label: 'Events', page: eventsPage },
  { path: 'subscriptions', label: 'Subscriptions', page: subscriptionsPage },
  { path: 'credentials', label: 'Credentials', page: credentialsPage },
  { path: 'alerts', label: 'Alerts', page: alertsPage },
];

let main;
let stopPage = null; // the current page's cleanup (timers)

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  return { parts: (path || 'overview').split('/').map(decodeURIComponent), params: new URLSearchParams(query || '') };
}

function shell() {
  const links = nav.map((n) => h('a', { href: '#/' + n.path, class: 'nav-link', dataset: { path: n.path } }, n.label));
  main = h('main', { id: 'main', class: 'main' });
  clear(app,
    h('div', { class: 'layout' },
      h('aside', { class: 'sidebar' },
        h('div', { class: 'brand' }, h('span', { class: 'brand-mark' }, 'd'), 'dispatch'),
        h('nav', { 'aria-label': 'Console' }, links),
        h('div', { class: 'sidebar-foot' },
          api.insecure ? h('div', { class: 'insecure' }, 'Insecure mode: no admin token configured') : null,
          h('button', { class: 'btn btn-ghost', id: 'logout', onclick: signOut }, 'Sign out'))),
      main));
  app.className = '';
}

async function signOut() {
  try { await api.logout(); } catch { /* the session may be gone already */ }
  showLogin();
}

function route() {
  if (!main) return;
  if (stopPage) { stopPage(); stopPage = null; }
  const { parts, params } = parseHash();
  let page;
  if (parts[0] === 'jobs' && parts[1]) page = (el) => jobPage(el, parts[1]);
  else if (parts[0] === 'events' && parts[1]) page = (el) => eventPage(el, parts[1]);
  else if (parts[0] === 'subscriptions' && parts[1]) page = (el) => subscriptionPage(el, parts[1]);
  else page = (nav.find((n) => n.path === parts[0]) || nav[0]).page;
  for (const a of document.querySelectorAll('.nav-link')) {
    a.classList.toggle('active', a.dataset.path === parts[0]);
  }
  // Each page draws into an element of its own, which the next route
  // takes off the page: an answer that arrives after the operator moved on
  // is drawn where nobody sees it, never over the page they moved to. A
  // page whose answer would do more than draw (open another page, take a
  // note meant for the next page) first checks that its element is still
  // shown (view.isConnected).
  const view = h('div', { class: 'view' });
  clear(main, view);
  try {
    stopPage = page(view, params) || null;
  } catch (e) {
    clear(view, errorBox(e));
  }
}

function showLogin(message) {
  main = null;
  if (stopPage) { stopPage(); stopPage = null; }
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'current-password', required: true, placeholder: 'DISPATCH_ADMIN_TOKEN' });
  const status = h('div', { class: 'login-status' }, message ? errorBox({ message }) : null);
  const form = h('form', { class: 'login-card', id: 'login-form' },
    h('div', { class: 'brand brand-lg' }, h('span', { class: 'brand-mark' }, 'd'), 'dispatch'),
    h('p', { class: 'muted' }, 'Sign in to the operator console with the admin token.'),
    api.insecure ? h('div', { class: 'alert alert-warn small', id: 'insecure-hint' },
      'Local mode: no admin token is configured (DISPATCH_INSECURE), so any token signs in.') : null,
    h('label', { for: 'token' }, 'Admin token'), input,
    h('button', { type: 'submit', class: 'btn btn-primary', id: 'login' }, 'Sign in'),
    status);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api.login(input.value);
      shell();
      route();
    } catch (e) {
      clear(status, errorBox(e.status === 401 ? { message: 'That token was not accepted.' } : e));
      input.select();
    }
  });
  clear(app, h('div', { class: 'login' }, form));
  app.className = '';
  input.focus();
}

window.addEventListener('hashchange', route);
window.addEventListener('signed-out', () => showLogin('Your session has ended. Sign in again.'));

(async () => {
  try {
    if (await api.session()) {
      shell();
      route();
    } else {
      showLogin();
    }
  } catch (e) {
    clear(app, errorBox(e));
  }
})();
