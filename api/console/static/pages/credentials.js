import { h, clear, errorBox, empty, fmtTime, toast } from '../dom.js';
import * as api from '../api.js';

export function credentialsPage(main) {
  const secretPanel = h('div', { id: 'secret-panel' });
  const list = h('div', { id: 'credentials-list' }, h('div', { class: 'loading' }, 'Loading…'));
  const scheme = h('select', { name: 'signatureScheme', id: 'c-scheme' },
    h('option', { value: 'FLOWCATALYST' }, 'FLOWCATALYST (X-FLOWCATALYST-SIGNATURE)'),
    h('option', { value: 'STANDARD_WEBHOOKS' }, 'STANDARD_WEBHOOKS (webhook-signature)'));
  const nameInput = h('input', { name: 'name', id: 'c-name', maxlength: 100, placeholder: 'Billing partner' });
  const bearer = h('input', { name: 'bearerToken', id: 'c-bearer', type: 'password', autocomplete: 'off', placeholder: 'optional' });
  const targets = h('textarea', { name: 'allowedTargets', id: 'c-targets', rows: 2, placeholder: 'https://partner.example\nhttps://hooks.example:8443/in/' });
  const form = h('form', { class: 'card filters', id: 'create-credentials' },
    h('h3', {}, 'New credentials'),
    h('div', { class: 'filter-row' },
      h('label', { class: 'field' }, h('span', {}, 'Name'), nameInput),
      h('label', { class: 'field' }, h('span', {}, 'Signature scheme'), scheme),
      h('label', { class: 'field' }, h('span', {}, 'Bearer token sent to receivers'), bearer),
      h('label', { class: 'field field-wide' }, h('span', {}, 'Allowed targets, one per line'), targets),
      h('div', { class: 'filter-actions' }, h('button', { class: 'btn btn-primary', type: 'submit', id: 'create' }, 'Create'))),
    h('div', { class: 'muted small' }, targetsHint),
    h('div', { class: 'muted small' }, 'A signing secret is generated and shown once. Secrets are encrypted at rest and never shown again.'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { signatureScheme: scheme.value, allowedTargets: parseTargets(targets.value) };
    if (nameInput.value.trim()) body.name = nameInput.value.trim();
    if (bearer.value) body.bearerToken = bearer.value;
    try {
      const c = await api.post('/api/admin/dispatch/credentials', body);
      nameInput.value = '';
      bearer.value = '';
      targets.value = '';
      showSecret(c, 'Credentials created');
      load();
    } catch (e) {
      clear(secretPanel, errorBox(e));
    }
  });
  const targetsPanel = h('div', { id: 'targets-panel' });
  clear(main, h('div', { class: 'page-head' }, h('h1', {}, 'Credentials')), secretPanel, form, targetsPanel, list);

  // editTargets opens the form that replaces a credentials' allowedTargets.
  function editTargets(c) {
    const area = h('textarea', { id: 'targets-edit', rows: Math.max(2, c.allowedTargets.length + 1), value: c.allowedTargets.join('\n') });
    const status = h('div', { id: 'targets-status' });
    const edit = h('form', { class: 'card filters', id: 'targets-form', dataset: { id: c.id } },
      h('h3', {}, 'Allowed targets of ', credentialsLabel(c)),
      h('label', { class: 'field' }, h('span', {}, 'One per line'), area),
      h('div', { class: 'muted small hint' }, targetsHint,
        ' Jobs already created for a target you remove end in ERROR, unsent.'),
      status,
      h('div', { class: 'form-actions' },
        h('button', { class: 'btn btn-primary', type: 'submit', id: 'save-targets' }, 'Save'), ' ',
        h('button', { class: 'btn btn-ghost', type: 'button', id: 'cancel-targets', onclick: () => clear(targetsPanel) }, 'Cancel')));
    edit.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await api.patch('/api/admin/dispatch/credentials/' + c.id, { allowedTargets: parseTargets(area.value) });
        clear(targetsPanel);
        toast('Allowed targets saved');
        load();
      } catch (e) {
        clear(status, errorBox(e));
      }
    });
    clear(targetsPanel, edit);
    area.focus();
  }

  // rename opens the form that changes a credentials' name.
  function rename(c) {
    const input = h('input', { id: 'name-edit', maxlength: 100, value: c.name, placeholder: 'Billing partner' });
    const status = h('div', { id: 'name-status' });
    const edit = h('form', { class: 'card filters', id: 'name-form', dataset: { id: c.id } },
      h('h3', {}, 'Name of ', h('span', { class: 'mono' }, c.id)),
      h('label', { class: 'field field-narrow' }, h('span', {}, 'Name (empty: none)'), input),
      status,
      h('div', { class: 'form-actions' },
        h('button', { class: 'btn btn-primary', type: 'submit', id: 'save-name' }, 'Save'), ' ',
        h('button', { class: 'btn btn-ghost', type: 'button', onclick: () => clear(targetsPanel) }, 'Cancel')));
    edit.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await api.patch('/api/admin/dispatch/credentials/' + c.id, { name: input.value.trim() });
        clear(targetsPanel);
        toast('Name saved');
        load();
      } catch (e) {
        clear(status, errorBox(e));
      }
    });
    clear(targetsPanel, edit);
    input.focus();
  }

  // targetsRow is the line under a credentials' row that says where they
  // may be sent, with the button that changes it.
  function targetsRow(c) {
    const entries = c.allowedTargets.length
      ? c.allowedTargets.map((t) => h('code', { class: 'target' }, t))
      : [h('span', { class: 'chip chip-disabled', title: 'no allowed targets: jobs and subscriptions with these credentials are refused' }, 'nowhere')];
    return h('tr', { class: 'targets-row', dataset: { targetsOf: c.id } },
      h('td', { colspan: 7 }, h('div', { class: 'targets' },
        h('span', { class: 'muted small' }, 'Sent only to'), entries,
        h('button', { class: 'btn btn-sm btn-ghost', dataset: { editTargets: c.id }, onclick: () => editTargets(c) }, 'Change targets'))));
  }

  function showSecret(c, title) {
    const pre = h('code', { class: 'secret', id: 'new-secret' }, c.signingSecret);
    clear(secretPanel, h('div', { class: 'alert alert-ok secret-box' },
      h('div', {}, h('strong', {}, `${title}: `), credentialsLabel(c)),
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
        h('thead', {}, h('tr', {}, ['Credentials', 'Scheme', 'Bearer token', 'Used by', 'Old secret valid until', 'Created', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, res.items.map((c) => {
          const cell = h('td', { class: 'row-actions' },
            h('button', { class: 'btn btn-sm', dataset: { rotate: c.id }, onclick: () => rotate(c) }, 'Rotate'), ' ',
            h('button', { class: 'btn btn-sm btn-ghost', dataset: { delete: c.id }, onclick: () => confirmDelete(c, cell) }, 'Delete'));
          return [h('tr', { class: 'cred-row', dataset: { id: c.id } },
            h('td', {}, h('div', { class: 'cred-name' }, c.name ? h('div', { class: 'sub-name' }, c.name) : h('div', { class: 'muted' }, 'unnamed'),
              h('div', { class: 'mono small muted' }, c.id)),
            h('button', { class: 'btn btn-sm btn-ghost rename', dataset: { rename: c.id }, onclick: () => rename(c) }, 'Rename')),
            h('td', {}, c.signatureScheme), h('td', {}, c.hasBearerToken ? 'set' : '—'),
            h('td', { class: 'cred-usage' }, usageText(c.usage)),
            h('td', { class: 'prev-until' }, c.previousSecretExpiresAt ? fmtTime(c.previousSecretExpiresAt) : '—'),
            h('td', { title: 'updated ' + fmtTime(c.updatedAt) }, fmtTime(c.createdAt)), cell), targetsRow(c)];
        }))))));
    } catch (e) {
      clear(list, errorBox(e));
    }
  }
  load();
  return null;
}

// credentialsLabel is credentials' name with their id, or the id alone.
export function credentialsLabel(c) {
  return c.name
    ? h('span', { class: 'cred-label' }, h('strong', {}, c.name), ' ', h('span', { class: 'mono muted small' }, c.id))
    : h('span', { class: 'mono' }, c.id);
}

// usageText says where credentials are used.
function usageText(u) {
  if (!u) return '—';
  const parts = [];
  if (u.subscriptions) parts.push(`${u.subscriptions} subscription${u.subscriptions === 1 ? '' : 's'}`);
  if (u.liveJobs) parts.push(`${u.liveJobs.toLocaleString()}${u.liveJobsExact ? '' : '+'} live job${u.liveJobs === 1 ? '' : 's'}`);
  if (u.alertDestinations) parts.push(`${u.alertDestinations} alert destination${u.alertDestinations === 1 ? '' : 's'}`);
  return parts.length ? parts.join(' · ') : h('span', { class: 'muted' }, 'unused');
}

const targetsHint = 'Where these credentials may be sent: origins (https://partner.example, with the port when it is not the default), ' +
  'each optionally followed by a path prefix (https://partner.example/hooks/). A job or subscription with any other target is refused. ' +
  'None: nowhere.';

// parseTargets reads one target per line (commas and spaces separate too).
function parseTargets(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}
