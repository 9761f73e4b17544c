import { h, clear, errorBox, empty, statusChip, fmtTime, ago, toast } from '../dom.js';
import * as api from '../api.js';

// alertsPage lists the alert destinations (admin) and the recent alerts:
// the jobs of source dispatch.alerts, delivered like any job.
export function alertsPage(main) {
  const status = h('div', { id: 'alert-status' });
  const destinations = h('div', { id: 'alert-destinations' }, h('div', { class: 'loading' }, 'Loading…'));
  const recent = h('div', { id: 'alert-recent' }, h('div', { class: 'loading' }, 'Loading…'));
  const name = h('input', { name: 'name', id: 'a-name', required: true, placeholder: 'ops channel' });
  const kind = h('select', { name: 'kind', id: 'a-kind' },
    h('option', { value: 'slack' }, 'Slack (incoming webhook)'),
    h('option', { value: 'webhook' }, 'Webhook (signed)'));
  const url = h('input', { name: 'url', id: 'a-url', required: true, placeholder: 'https://hooks.slack.com/services/…' });
  const creds = h('input', { name: 'credentialsId', id: 'a-credentials', placeholder: 'webhook only' });
  const form = h('form', { class: 'card filters', id: 'create-alert-destination' },
    h('h3', {}, 'New destination'),
    h('div', { class: 'filter-row' },
      h('label', { class: 'field' }, h('span', {}, 'Name'), name),
      h('label', { class: 'field' }, h('span', {}, 'Kind'), kind),
      h('label', { class: 'field field-wide' }, h('span', {}, 'URL'), url),
      h('label', { class: 'field' }, h('span', {}, 'Credentials id'), creds),
      h('div', { class: 'filter-actions' }, h('button', { class: 'btn btn-primary', type: 'submit', id: 'create-destination' }, 'Add'))),
    h('div', { class: 'muted small' }, 'Alerts: a subscription disabled or enabled again, a target\'s circuit breaker opened or closed, ' +
      'jobs exhausting their retries above DISPATCH_ALERT_EXHAUSTED_THRESHOLD, the oldest pending job older than DISPATCH_ALERT_BACKLOG_AGE. ' +
      'Each destination gets at most one alert of a kind per DISPATCH_ALERT_WINDOW; what happens meanwhile comes in the next, summed up. ' +
      'A webhook is signed with its credentials, whose allowed targets must include its URL.'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { name: name.value, kind: kind.value, url: url.value };
    if (creds.value.trim()) body.credentialsId = creds.value.trim();
    try {
      await api.post('/api/admin/dispatch/alerts/destinations', body);
      name.value = '';
      url.value = '';
      creds.value = '';
      clear(status);
      toast('Destination added');
      loadDestinations();
    } catch (e) {
      clear(status, errorBox(e));
    }
  });
  clear(main, h('div', { class: 'page-head' }, h('h1', {}, 'Alerts')), status, form,
    h('h3', {}, 'Destinations'), destinations, h('h3', {}, 'Recent alerts'), recent);

  function confirmDelete(d, cell) {
    clear(cell, h('span', { class: 'small' }, 'Delete? Alerts already made are still delivered. '),
      h('button', { class: 'btn btn-danger btn-sm', dataset: { confirmDelete: d.id }, onclick: async () => {
        try { await api.del('/api/admin/dispatch/alerts/destinations/' + d.id); toast('Destination deleted'); loadDestinations(); } catch (e) { clear(status, errorBox(e)); }
      } }, 'Delete'), ' ',
      h('button', { class: 'btn btn-ghost btn-sm', onclick: loadDestinations }, 'Keep'));
  }

  async function loadDestinations() {
    try {
      const res = await api.get('/api/admin/dispatch/alerts/destinations');
      if (!res.items.length) {
        clear(destinations, h('div', { class: 'card' }, empty('No alert destinations yet', 'Add one above to be told when delivery goes wrong.')));
        return;
      }
      clear(destinations, h('div', { class: 'card card-flush' }, h('div', { class: 'table-scroll' }, h('table', { class: 'table', id: 'destinations-table' },
        h('thead', {}, h('tr', {}, ['Name', 'Kind', 'URL', 'Credentials', 'Created', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, res.items.map((d) => {
          const cell = h('td', { class: 'row-actions' },
            h('button', { class: 'btn btn-sm btn-ghost', dataset: { delete: d.id }, onclick: () => confirmDelete(d, cell) }, 'Delete'));
          return h('tr', { class: 'destination-row', dataset: { id: d.id } },
            h('td', {}, d.name), h('td', {}, d.kind), h('td', { class: 'truncate mono', title: d.url }, d.url),
            h('td', { class: 'mono' }, d.credentialsId || '—'), h('td', {}, fmtTime(d.createdAt)), cell);
        }))))));
    } catch (e) {
      clear(destinations, errorBox(e));
    }
  }

  async function loadRecent() {
    try {
      const res = await api.get('/api/dispatch/jobs?source=dispatch.alerts&size=20');
      if (!res.items.length) {
        clear(recent, h('div', { class: 'card' }, empty('No alerts yet', 'Alerts are jobs of source dispatch.alerts; they appear here as they are made.')));
        return;
      }
      clear(recent, h('div', { class: 'card card-flush' }, h('div', { class: 'table-scroll' }, h('table', { class: 'table', id: 'alerts-table' },
        h('thead', {}, h('tr', {}, ['Job', 'Alert', 'Events', 'Destination', 'Status', 'Created'].map((t) => h('th', {}, t)))),
        h('tbody', {}, res.items.map((j) => h('tr', { class: 'alert-row', dataset: { id: j.id } },
          h('td', {}, h('a', { href: '#/jobs/' + j.id, class: 'mono job-link' }, j.id)),
          h('td', {}, j.type),
          h('td', { class: 'num' }, (j.metadata && j.metadata.alertCount) || ''),
          h('td', { class: 'truncate', title: j.targetUrl }, j.targetUrl),
          h('td', {}, statusChip(j.status)),
          h('td', { title: fmtTime(j.createdAt) }, ago(j.createdAt)))))))));
    } catch (e) {
      clear(recent, errorBox(e));
    }
  }

  loadDestinations();
  loadRecent();
  const timer = setInterval(loadRecent, 10000);
  return () => clearInterval(timer);
}
