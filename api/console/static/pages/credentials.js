import { h, clear, errorBox, empty, fmtTime, toast } from '../dom.js';
import * as api from '../api.js';

export function credentialsPage(main) {
  const secretPanel = h('div', { id: 'secret-panel' });
  const list = h('div', { id: 'credentials-list' }, h('div', { class: 'loading' }, 'Loading…'));
  const scheme = h('select', { name: 'signatureScheme', id: 'c-scheme' },
    h('option', { value: 'FLOWCATALYST' }, 'FLOWCATALYST (X-FLOWCATALYST-SIGNATURE)'),
    h('option', { value: 'STANDARD_WEBHOOKS' }, 'STANDARD_WEBHOOKS (webhook-signature)'));
  const bearer = h('input', { name: 'bearerToken', id: 'c-bearer', type: 'password', autocomplete: 'off', placeholder: 'optional' });
  const form = h('form', { class: 'card filters', id: 'create-credentials' },
    h('h3', {}, 'New credentials'),
    h('div', { class: 'filter-row' },
      h('label', { class: 'field' }, h('span', {}, 'Signature scheme'), scheme),
      h('label', { class: 'field' }, h('span', {}, 'Bearer token sent to receivers'), bearer),
      h('div', { class: 'filter-actions' }, h('button', { class: 'btn btn-primary', type: 'submit', id: 'create' }, 'Create'))),
    h('div', { class: 'muted small' }, 'A signing secret is generated and shown once. Secrets are encrypted at rest and never shown again.'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { signatureScheme: scheme.value };
    if (bearer.value) body.bearerToken = bearer.value;
    try {
      const c = await api.post('/api/admin/dispatch/credentials', body);
      bearer.value = '';
      showSecret(c, 'Credentials created');
      load();
    } catch (e) {
      clear(secretPanel, errorBox(e));
    }
  });
  clear(main, h('div', { class: 'page-head' }, h('h1', {}, 'Credentials')), secretPanel, form, list);

  function showSecret(c, title) {
    const pre = h('code', { class: 'secret', id: 'new-secret' }, c.signingSecret);
    clear(secretPanel, h('div', { class: 'alert alert-ok secret-box' },
      h('div', {}, h('strong', {}, `${title}: `), h('span', { class: 'mono' }, c.id)),
      h('div', { class: 'small' }, 'Copy the signing secret now. It will not be shown again.'),
      pre,
      h('div', {},
        h('button', { class: 'btn', onclick: async () => { try { await navigator.clipboard.writeText(c.signingSecret); toast('Copied'); } catch { toast('Copy failed: select the text', 'bad'); } } }, 'Copy'),
        ' ', h('button', { class: 'btn btn-ghost', id: 'dismiss-secret', onclick: () => clear(secretPanel) }, 'I have saved it'))));
  }

  async function rotate(c) {
    try {
      const r = await api.post(`/api/admin/dispatch/credentials/${c.id}/rotate`, {});
      showSecret(r, 'Secret rotated');
      load();
    } catch (e) {
      clear(secretPanel, errorBox(e));
    }
  }

  function confirmDelete(c, cell) {
    clear(cell, h('span', { class: 'small' }, 'Delete? Jobs using it will fail. '),
      h('button', { class: 'btn btn-danger btn-sm', dataset: { confirmDelete: c.id }, onclick: async () => {
        try { await api.del('/api/admin/dispatch/credentials/' + c.id); toast('Credentials deleted'); load(); } catch (e) { clear(secretPanel, errorBox(e)); }
      } }, 'Delete'), ' ',
      h('button', { class: 'btn btn-ghost btn-sm', onclick: load }, 'Keep'));
  }

  async function load() {
    try {
      const res = await api.get('/api/admin/dispatch/credentials?size=100');
      if (!res.items.length) {
        clear(list, h('div', { class: 'card' }, empty('No credentials yet', 'Create one above; jobs refer to it by credentialsId.')));
        return;
      }
      // Times may wrap (date over time) so that the row's buttons fit; on a
      // narrower screen the table scrolls rather than cutting them off.
      clear(list, h('div', { class: 'card card-flush' }, h('div', { class: 'table-scroll' }, h('table', { class: 'table', id: 'credentials-table' },
        h('thead', {}, h('tr', {}, ['Id', 'Scheme', 'Bearer token', 'Previous secret valid until', 'Created', 'Updated', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, res.items.map((c) => {
          const cell = h('td', { class: 'row-actions' },
            h('button', { class: 'btn btn-sm', dataset: { rotate: c.id }, onclick: () => rotate(c) }, 'Rotate'), ' ',
            h('button', { class: 'btn btn-sm btn-ghost', dataset: { delete: c.id }, onclick: () => confirmDelete(c, cell) }, 'Delete'));
          return h('tr', { dataset: { id: c.id } },
            h('td', { class: 'mono' }, c.id), h('td', {}, c.signatureScheme), h('td', {}, c.hasBearerToken ? 'set' : '—'),
            h('td', { class: 'prev-until' }, c.previousSecretExpiresAt ? fmtTime(c.previousSecretExpiresAt) : '—'),
            h('td', {}, fmtTime(c.createdAt)), h('td', {}, fmtTime(c.updatedAt)), cell);
        }))))));
    } catch (e) {
      clear(list, errorBox(e));
    }
  }
  load();
  return null;
}
