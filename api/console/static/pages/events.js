// Events and subscriptions: subscriptions with their status,
// create/edit, enable/disable/verify, delete; events with search and a
// detail that shows each job's current status.
import { h, clear, rerender, errorBox, empty, statusChip, fmtTime, ago, toast, rawJSON, pager } from '../dom.js';
import * as api from '../api.js';

const subStatuses = ['ACTIVE', 'PENDING_VERIFICATION', 'DISABLED'];

// flash is a message the next subscriptions list shows once (the outcome
// of a create or an edit made on another page).
let flash = null;

const field = (label, input, wide) => h('label', { class: 'field' + (wide ? ' field-wide' : '') }, h('span', {}, label), input);

// handshakeResult says what the verification handshake found.
function handshakeResult(s) {
  if (s.status === 'ACTIVE') {
    return h('div', { class: 'alert alert-ok', id: 'handshake' }, h('strong', {}, `${s.name}: `), 'the endpoint answered the challenge; the subscription is ACTIVE.');
  }
  return h('div', { class: 'alert alert-warn', id: 'handshake' }, h('strong', {}, `${s.name} is ${s.status}: `), s.disabledReason || 'the handshake did not pass.');
}

// verification says whether a subscription must pass the handshake on
// its url to be ACTIVE, and whether its current url has.
function verification(s) {
  if (!s.verifyRequired) return null;
  return s.verifiedUrl === s.url ? 'verified endpoint' : 'endpoint not verified';
}

// healthCell says how a subscription's deliveries have gone lately: the
// share of its last finished jobs delivered, its last success, and its
// last failure with the error (the receiver's words, as text).
function healthCell(s) {
  const hl = s.health;
  if (!hl) return null;
  if (!hl.recentJobs) return h('div', { class: 'health' }, h('span', { class: 'muted small' }, 'no deliveries yet'));
  const pct = Math.floor(hl.successRate * 1000 + 1e-6) / 10;
  const tone = hl.successRate >= 0.99 ? 'ok' : hl.successRate >= 0.9 ? 'warn' : 'bad';
  return h('div', { class: 'health' },
    h('div', {}, h('span', { class: 'rate rate-' + tone }, pct + '%'),
      h('span', { class: 'muted small' }, ` of the last ${hl.recentJobs} job${hl.recentJobs === 1 ? '' : 's'} delivered`)),
    h('div', { class: 'small last-success' }, 'Last success ',
      hl.lastSuccessAt ? h('span', { title: fmtTime(hl.lastSuccessAt) }, ago(hl.lastSuccessAt)) : h('span', { class: 'muted' }, 'never')),
    hl.lastFailureAt ? h('div', { class: 'small last-failure' }, 'Last failure ', h('span', { title: fmtTime(hl.lastFailureAt) }, ago(hl.lastFailureAt)),
      hl.lastError ? h('div', { class: 'error-text failure-reason', title: hl.lastError }, hl.lastError) : null) : null);
}

function typeList(types) {
  return h('div', { class: 'types' }, types.map((t) => h('code', { class: 'type-pill' }, t)));
}

export function subscriptionsPage(main, params) {
  const panel = h('div', { id: 'sub-panel' }, flash);
  flash = null;
  const status = params.get('status') || '';
  const eventType = params.get('eventType') || '';
  const page = Number(params.get('page') || 0);
  const before = params.get('before') || '';
  const chips = h('div', { class: 'chips', role: 'group', 'aria-label': 'Status' },
    ['', ...subStatuses].map((s) => h('button', {
      type: 'button', class: 'chip-toggle' + (s === status ? ' on' : ''), 'aria-pressed': String(s === status), dataset: { status: s },
      onclick: () => go({ status: s, eventType: typeInput.value.trim() }),
    }, s || 'All')));
  const typeInput = h('input', { name: 'eventType', id: 's-eventType', value: eventType, placeholder: 'order.created' });
  const typeField = field('Receives event type', typeInput);
  typeField.classList.add('field-narrow');
  const form = h('form', { class: 'filters card', id: 'sub-filters' }, chips,
    h('div', { class: 'filter-row' },
      typeField,
      h('div', { class: 'filter-actions' },
        h('button', { type: 'submit', class: 'btn btn-primary' }, 'Filter'),
        h('button', { type: 'button', class: 'btn btn-ghost', onclick: () => { location.hash = '#/subscriptions'; } }, 'Clear'))));
  form.addEventListener('submit', (ev) => { ev.preventDefault(); go({ status, eventType: typeInput.value.trim() }); });
  const results = h('div', { id: 'subs-results' }, h('div', { class: 'loading' }, 'Loading…'));
  clear(main,
    h('div', { class: 'page-head' },
      h('div', {}, h('h1', {}, 'Subscriptions'),
        h('div', { class: 'muted' }, 'A published event becomes one signed job per ACTIVE subscription whose patterns and filter match it.')),
      h('a', { href: '#/subscriptions/new', class: 'btn btn-primary', id: 'new-subscription' }, 'New subscription')),
    panel, form, results);

  function go(f, at = {}) {
    const q = new URLSearchParams();
    if (f.status) q.set('status', f.status);
    if (f.eventType) q.set('eventType', f.eventType);
    if (at.page) q.set('page', String(at.page));
    if (at.before) q.set('before', at.before);
    const target = '#/subscriptions' + (q.toString() ? '?' + q : '');
    if (location.hash === target) load(); else location.hash = target;
  }

  async function act(s, what) {
    try {
      const out = await api.post(`/api/dispatch/subscriptions/${s.id}/${what}`);
      // An enable of an unverified url runs the handshake: show its outcome.
      if (what === 'verify' || (what === 'enable' && out.status !== 'ACTIVE')) clear(panel, handshakeResult(out));
      else { clear(panel); toast(`${out.name} is ${out.status}`); }
      load();
    } catch (e) {
      clear(panel, errorBox(e));
    }
  }

  function confirmDelete(s, cell) {
    clear(cell, h('span', { class: 'small' }, 'Delete? Jobs already made go on. '),
      h('button', { class: 'btn btn-danger btn-sm', dataset: { confirmDelete: s.id }, onclick: async () => {
        try { await api.del('/api/dispatch/subscriptions/' + s.id); toast(`${s.name} deleted`); load(); } catch (e) { clear(panel, errorBox(e)); }
      } }, 'Delete'), ' ',
      h('button', { class: 'btn btn-ghost btn-sm', onclick: load }, 'Keep'));
  }

  function row(s) {
    const cell = h('td', { class: 'row-actions sub-actions' },
      s.status === 'DISABLED' ? h('button', { class: 'btn btn-sm', dataset: { enable: s.id }, onclick: () => act(s, 'enable') }, 'Enable') : null,
      s.status === 'ACTIVE' ? h('button', { class: 'btn btn-sm', dataset: { disable: s.id }, onclick: () => act(s, 'disable') }, 'Disable') : null,
      // A disabled one is verified by Enable (the API refuses /verify).
      s.status === 'DISABLED' ? null : h('button', { class: 'btn btn-sm', dataset: { verify: s.id }, title: 'Run the verification handshake again: ACTIVE if the endpoint echoes the challenge, otherwise PENDING_VERIFICATION (no events) until it does', onclick: () => act(s, 'verify') }, 'Verify'),
      h('a', { class: 'btn btn-sm btn-ghost', href: '#/subscriptions/' + s.id, dataset: { edit: s.id } }, 'Edit'),
      h('button', { class: 'btn btn-sm btn-ghost', dataset: { delete: s.id }, onclick: () => confirmDelete(s, cell) }, 'Delete'));
    const opts = [verification(s), s.orderingKey ? `ordered by ${s.orderingKey}` : null, s.rateLimitPerSecond ? `≤ ${s.rateLimitPerSecond}/s` : null,
      `${s.maxRetries} tries, ${s.retryStrategy}`].filter(Boolean).join(' · ');
    return h('tr', { dataset: { id: s.id } },
      h('td', { class: 'sub-main' },
        h('a', { href: '#/subscriptions/' + s.id, class: 'sub-name' }, s.name),
        h('div', { class: 'mono sub-url', title: s.url }, s.url),
        h('div', { class: 'small muted' }, opts),
        h('div', { class: 'small muted' }, h('span', { class: 'mono' }, s.id), ' · ', h('span', { title: fmtTime(s.createdAt) }, 'created ' + ago(s.createdAt)))),
      h('td', {}, statusChip(s.status), s.disabledReason ? h('div', { class: 'small muted reason', title: s.disabledReason }, s.disabledReason) : null),
      h('td', { class: 'sub-health' }, healthCell(s)),
      h('td', {}, typeList(s.eventTypes),
        Object.keys(s.filter).length ? h('div', { class: 'small muted filter-note' }, 'where ', Object.entries(s.filter).map(([k, v]) => `${k}=${v}`).join(' and ')) : null),
      cell);
  }

  async function load() {
    const q = new URLSearchParams({ size: '25' });
    if (status) q.set('status', status);
    if (eventType) q.set('eventType', eventType);
    if (page) q.set('page', String(page));
    if (before) q.set('before', before);
    try {
      const res = await api.get('/api/dispatch/subscriptions?' + q);
      clear(results, res.items.length
        ? h('div', { class: 'card card-flush' }, h('div', { class: 'table-scroll' }, h('table', { class: 'table table-subs', id: 'subscriptions-table' },
          h('thead', {}, h('tr', {}, ['Subscription', 'Status', 'Health', 'Event types', ''].map((t) => h('th', {}, t)))),
          h('tbody', {}, res.items.map(row)))), pager(res, 'subscription', { page, before }, (at) => go({ status, eventType }, at), 'subs'))
        : h('div', { class: 'card' }, (status || eventType)
          ? empty('No subscriptions match these filters', 'Clear the filters to see them all.')
          : empty('No subscriptions yet', 'Create one: events of the types it names will be delivered to its URL.')));
    } catch (e) {
      clear(results, errorBox(e));
    }
  }
  load();
  return null;
}

// pairs reads "k=v" (or "K: v" for headers) entries, one per line, so a
// value may hold commas; bad entries are reported, not dropped.
function pairs(text, sep, label, problems) {
  const out = {};
  for (const line of text.split('\n')) {
    const s = line.trim();
    if (!s) continue;
    const i = s.indexOf(sep);
    if (i <= 0) { problems.push({ field: label, message: `"${s}" is not ${sep === '=' ? 'key=value' : 'Name: value'}` }); continue; }
    out[s.slice(0, i).trim()] = s.slice(i + 1).trim();
  }
  return out;
}

// subscriptionPage shows one subscription with its form, or the form of
// a new one. An answer that arrives after the operator opened another page
// is dropped (main, the page's own element, is no longer shown).
export function subscriptionPage(main, id) {
  const isNew = id === 'new';
  clear(main, h('div', { class: 'loading' }, 'Loading…'));
  (async () => {
    let sub = null;
    let creds = { items: [] };
    try {
      [sub, creds] = await Promise.all([
        isNew ? null : api.get('/api/dispatch/subscriptions/' + encodeURIComponent(id)),
        api.get('/api/admin/dispatch/credentials?size=100').catch(() => ({ items: [] })),
      ]);
    } catch (e) {
      if (!main.isConnected) return;
      clear(main, h('div', { class: 'page-head' }, h('div', {}, h('a', { href: '#/subscriptions', class: 'back' }, '← Subscriptions'), h('h1', {}, 'Subscription'))), errorBox(e));
      return;
    }
    if (!main.isConnected) return;
    render(sub, creds.items);
  })();

  function render(sub, credentials) {
    const s = sub || { name: '', url: '', eventTypes: [], filter: {}, headers: {}, maxRetries: 5, retryStrategy: 'exponential' };
    const inp = (name, value, attrs = {}) => h('input', { name, id: 'sub-' + name, value: value === undefined || value === null ? '' : String(value), ...attrs });
    const name = inp('name', s.name, { required: true, placeholder: 'orders to billing' });
    const url = inp('url', s.url, { required: true, type: 'url', placeholder: 'https://billing.example.com/hooks' });
    const types = inp('eventTypes', s.eventTypes.join(', '), { required: true, placeholder: 'order.created, invoice.*' });
    const filter = h('textarea', { name: 'filter', id: 'sub-filter', rows: Math.max(2, Object.keys(s.filter).length), placeholder: 'region=eu\ntenant=acme' });
    filter.value = Object.entries(s.filter).map(([k, v]) => `${k}=${v}`).join('\n');
    const headers = h('textarea', { name: 'headers', id: 'sub-headers', rows: 3, placeholder: 'X-Team: billing' });
    headers.value = Object.entries(s.headers).map(([k, v]) => `${k}: ${v}`).join('\n');
    const credSel = h('select', { name: 'credentialsId', id: 'sub-credentialsId' },
      h('option', { value: '' }, 'none (unsigned)'),
      credentials.map((c) => h('option', { value: c.id }, c.name ? `${c.name} · ${c.id} · ${c.signatureScheme}` : `${c.id} · ${c.signatureScheme}`)));
    if (s.credentialsId && !credentials.some((c) => c.id === s.credentialsId)) credSel.append(h('option', { value: s.credentialsId }, s.credentialsId));
    credSel.value = s.credentialsId || '';
    const retries = inp('maxRetries', s.maxRetries, { type: 'number', min: 1, max: 50 });
    const strategy = h('select', { name: 'retryStrategy', id: 'sub-retryStrategy' }, ['exponential', 'linear', 'fixed'].map((v) => h('option', { value: v }, v)));
    strategy.value = s.retryStrategy;
    const ordering = inp('orderingKey', s.orderingKey, { placeholder: '/customerId' });
    const rate = inp('rateLimitPerSecond', s.rateLimitPerSecond, { type: 'number', min: 1, max: 10000, placeholder: 'unlimited' });
    const verify = h('input', { type: 'checkbox', id: 'sub-verify', checked: true });
    const status = h('div', { id: 'sub-form-status' });

    const form = h('form', { class: 'card filters sub-form', id: 'subscription-form' },
      h('h3', {}, isNew ? 'New subscription' : 'Edit'),
      h('div', { class: 'filter-row' }, field('Name', name), field('Endpoint URL', url, true)),
      h('div', { class: 'filter-row' },
        field('Event types (exact, prefix.* or *; comma-separated)', types, true),
        field('Metadata filter (one key=value per line; all must match)', filter, true)),
      h('div', { class: 'filter-row' },
        field('Signing credentials', credSel), field('Attempts', retries), field('Retry strategy', strategy),
        field('Ordering key', ordering), field('Rate limit / s', rate)),
      h('div', { class: 'muted small hint' }, 'Ordering key: a JSON pointer into the event\'s data; events with the same value arrive in publish order. Rate limit: empty means unlimited.'),
      h('div', { class: 'filter-row' }, field('Headers (one "Name: value" per line)', headers, true)),
      isNew ? h('label', { class: 'toggle' }, verify, ' Verify the endpoint first (handshake): it starts PENDING_VERIFICATION and becomes ACTIVE when it echoes the challenge') : null,
      h('div', { class: 'filter-row form-actions' },
        h('button', { type: 'submit', class: 'btn btn-primary', id: 'save-subscription' }, isNew ? 'Create subscription' : 'Save changes'),
        h('a', { href: '#/subscriptions', class: 'btn btn-ghost' }, 'Cancel')),
      status);

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const problems = [];
      const body = {
        name: name.value.trim(), url: url.value.trim(),
        eventTypes: types.value.split(',').map((t) => t.trim()).filter(Boolean),
        maxRetries: Number(retries.value), retryStrategy: strategy.value,
      };
      const f = pairs(filter.value, '=', 'filter', problems);
      const hd = pairs(headers.value, ':', 'headers', problems);
      // On create an empty optional field is left out; on edit it is
      // cleared with null.
      const opt = (k, v, isEmpty) => { if (!isEmpty) body[k] = v; else if (!isNew) body[k] = null; };
      opt('filter', f, !Object.keys(f).length);
      opt('headers', hd, !Object.keys(hd).length);
      opt('credentialsId', credSel.value, !credSel.value);
      opt('orderingKey', ordering.value.trim(), !ordering.value.trim());
      opt('rateLimitPerSecond', Number(rate.value), rate.value === '');
      if (isNew && verify.checked) body.verify = true;
      if (problems.length) { clear(status, errorBox({ message: 'Some fields could not be read', details: problems })); return; }
      try {
        const out = isNew
          ? await api.post('/api/dispatch/subscriptions', body)
          : await api.patch('/api/dispatch/subscriptions/' + encodeURIComponent(id), body);
        // The operator opened another page meanwhile: stay there.
        if (!main.isConnected) { toast(`${out.name} ${isNew ? 'created' : 'saved'}; it is ${out.status}`); return; }
        flash = isNew && body.verify ? handshakeResult(out)
          : h('div', { class: 'alert alert-ok', id: 'saved' }, `${out.name} ${isNew ? 'created' : 'saved'}; it is ${out.status}.`);
        location.hash = '#/subscriptions';
      } catch (e) {
        clear(status, errorBox(e));
      }
    });

    const row = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' || v === null ? '—' : v)];
    const act = async (what) => {
      try {
        const out = await api.post(`/api/dispatch/subscriptions/${encodeURIComponent(id)}/${what}`);
        if (!main.isConnected) { toast(`${out.name} is ${out.status}`); return; }
        flash = what === 'verify' || (what === 'enable' && out.status !== 'ACTIVE') ? handshakeResult(out)
          : h('div', { class: 'alert alert-ok', id: 'saved' }, `${out.name} is ${out.status}.`);
        subscriptionPage(main, id);
      } catch (e) {
        clear(status, errorBox(e));
      }
    };
    const actions = sub ? h('div', { class: 'actions' },
      s.status === 'DISABLED' ? h('button', { class: 'btn', id: 'sub-enable', onclick: () => act('enable') }, 'Enable') : null,
      s.status === 'ACTIVE' ? h('button', { class: 'btn', id: 'sub-disable', onclick: () => act('disable') }, 'Disable') : null,
      s.status === 'DISABLED' ? null : h('button', { class: 'btn', id: 'sub-verify', title: 'Run the verification handshake again: ACTIVE if the endpoint echoes the challenge, otherwise PENDING_VERIFICATION (no events) until it does', onclick: () => act('verify') }, 'Verify endpoint')) : null;
    const note = flash;
    flash = null;
    clear(main,
      h('div', { class: 'page-head' },
        h('div', {}, h('a', { href: '#/subscriptions', class: 'back' }, '← Subscriptions'),
          h('h1', {}, isNew ? 'New subscription' : s.name, sub ? statusChip(s.status) : null)), actions),
      note,
      sub && sub.disabledReason ? h('div', { class: 'alert alert-warn', id: 'sub-reason' }, h('strong', {}, 'Reason: '), sub.disabledReason) : null,
      sub ? h('div', { class: 'card' }, h('dl', { class: 'fields' },
        row('Id', h('span', { class: 'mono' }, s.id)), row('Created', fmtTime(s.createdAt)), row('Updated', fmtTime(s.updatedAt)),
        row('Verification', h('span', { id: 'sub-verification' }, verification(s) || 'not required')),
        row('Health', h('div', { id: 'sub-health' }, healthCell(s))),
        row('Deliveries', h('a', { href: '#/jobs?metadata.subscriptionId=' + encodeURIComponent(s.id), id: 'sub-jobs' }, 'Jobs made for this subscription →')))) : null,
      form);
  }
  return null;
}

function eventQuery(p) {
  const q = new URLSearchParams();
  for (const k of ['type', 'source']) if (p.get(k)) q.set(k, p.get(k));
  for (const k of ['createdAfter', 'createdBefore']) if (p.get(k)) q.set(k, p.get(k));
  if (p.get('page')) q.set('page', p.get('page'));
  if (p.get('before')) q.set('before', p.get('before'));
  return q;
}

const finished = ['COMPLETED', 'ERROR', 'CANCELLED', 'EXPIRED'];

// dataOf is an event's data as sent (rawJSON: JSON.parse would round its
// big numbers), from the answer's text at path; the parsed value when
// the text cannot be read.
function dataOf(raw, path, parsed, how) {
  const v = raw && raw.at(...path);
  if (v) return v[how]();
  return how === 'pretty' ? JSON.stringify(parsed, null, 2) : JSON.stringify(parsed);
}

export function eventsPage(main, params) {
  const local = (k) => (params.get(k) ? params.get(k).replace(/(\.\d+)?Z$/, '').slice(0, 16) : '');
  const inp = (name, value, type = 'text', placeholder = '') => h('input', { name, id: 'e-' + name, value, type, placeholder });
  const form = h('form', { class: 'filters card', id: 'event-filters' },
    h('div', { class: 'filter-row' },
      field('Type', inp('type', params.get('type') || '', 'text', 'order.created')),
      field('Source', inp('source', params.get('source') || '', 'text', 'shop')),
      field('Created after (UTC)', inp('createdAfter', local('createdAfter'), 'datetime-local')),
      field('Created before (UTC)', inp('createdBefore', local('createdBefore'), 'datetime-local')),
      h('div', { class: 'filter-actions' },
        h('button', { type: 'submit', class: 'btn btn-primary', id: 'search-events' }, 'Search'),
        h('button', { type: 'button', class: 'btn btn-ghost', onclick: () => { location.hash = '#/events'; } }, 'Clear'))));
  const results = h('div', { id: 'events-results' }, h('div', { class: 'loading' }, 'Loading…'));
  clear(main, h('div', { class: 'page-head' },
    h('div', {}, h('h1', {}, 'Events'), h('div', { class: 'muted' }, 'Events published with POST /api/dispatch/events, newest first. Open one to see its jobs.'))),
  form, results);

  function show(q) {
    const target = '#/events' + (q.toString() ? '?' + q : '');
    if (location.hash === target) load(); else location.hash = target;
  }
  function search() {
    const fd = new FormData(form);
    const q = new URLSearchParams();
    for (const k of ['type', 'source']) if (fd.get(k).trim()) q.set(k, fd.get(k).trim());
    for (const k of ['createdAfter', 'createdBefore']) if (fd.get(k)) q.set(k, new Date(fd.get(k) + 'Z').toISOString());
    show(q);
  }
  // Newer and Older page through the search the address holds, not
  // through what the form holds now: an edit not searched yet changes no
  // page.
  function pageTo({ page = 0, before = '' } = {}) {
    const q = eventQuery(params);
    q.delete('page');
    q.delete('before');
    if (page) q.set('page', String(page));
    if (before) q.set('before', before);
    show(q);
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); search(); });

  async function load() {
    const q = eventQuery(params);
    q.set('size', '25');
    try {
      const { data: res, text } = await api.getWithText('/api/dispatch/events?' + q);
      const raw = rawJSON(text);
      const at = { page: res.page, before: params.get('before') || '' };
      rerender(results, res.items.length
        ? h('div', { class: 'card card-flush' }, h('div', { class: 'table-scroll' }, h('table', { class: 'table table-events', id: 'events-table' },
          h('thead', {}, h('tr', {}, ['Event', 'Type', 'Source', 'Data', 'Created'].map((t) => h('th', {}, t)))),
          h('tbody', {}, res.items.map((e, i) => {
            const data = dataOf(raw, ['items', i, 'data'], e.data, 'compact');
            return h('tr', { dataset: { id: e.id } },
              h('td', {}, h('a', { href: '#/events/' + e.id, class: 'mono event-link' }, e.id)),
              h('td', {}, h('code', { class: 'type-pill' }, e.type)),
              h('td', {}, e.source),
              h('td', { class: 'truncate mono small event-data', title: data }, data),
              h('td', { class: 'nowrap', title: fmtTime(e.createdAt) }, ago(e.createdAt)));
          })))),
          pager(res, 'event', at, pageTo, 'events'))
        : h('div', { class: 'card' }, q.toString() !== 'size=25'
          ? empty('No events match these filters', 'Widen the filters or clear them.')
          : empty('No events yet', 'Publish one with POST /api/dispatch/events; it fans out to the matching subscriptions.')));
    } catch (e) {
      clear(results, errorBox(e));
    }
  }
  load();
  const timer = setInterval(load, 10000);
  return () => clearInterval(timer);
}

// eventPage shows one event and its jobs. It refreshes every 5 s until
// every job has finished, redrawing only when something changed (a
// scrolled data block stays where it was).
export function eventPage(main, id) {
  const stale = h('div', { id: 'event-stale' }); // a refresh that failed, until one succeeds
  const body = h('div', {}, h('div', { class: 'loading' }, 'Loading…'));
  clear(main, stale, body);
  let stopped = false;
  let shown = null; // the answer the page shows, to skip a redraw that would change nothing
  let timer = null;
  const names = {}; // subscription id → name, for the jobs table
  async function load() {
    let e, text;
    try {
      ({ data: e, text } = await api.getWithText('/api/dispatch/events/' + encodeURIComponent(id)));
      const missing = e.jobs.filter((j) => !(j.subscriptionId in names)).map((j) => j.subscriptionId);
      await Promise.all([...new Set(missing)].slice(0, 50).map(async (sid) => {
        try { names[sid] = (await api.get('/api/dispatch/subscriptions/' + sid)).name; } catch { names[sid] = null; }
      }));
    } catch (err) {
      if (stopped) return;
      if (shown === null) {
        clear(body, h('div', { class: 'page-head' }, h('div', {}, h('a', { href: '#/events', class: 'back' }, '← Events'),
          h('h1', {}, 'Event ', h('span', { class: 'mono' }, id)))), errorBox(err));
      } else {
        clear(stale, errorBox(err));
      }
      return;
    }
    if (stopped) return;
    clear(stale);
    if (e.jobs.every((j) => finished.includes(j.status)) && timer !== null) { clearInterval(timer); timer = null; }
    const seen = JSON.stringify([text, e.jobs.map((j) => names[j.subscriptionId])]);
    if (seen === shown) return;
    shown = seen;
    render(e, rawJSON(text));
  }
  function render(e, raw) {
    const row = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' || v === null ? '—' : v)];
    const counts = {};
    for (const j of e.jobs) counts[j.status] = (counts[j.status] || 0) + 1;
    const meta = Object.entries(e.metadata);
    rerender(body,
      h('div', { class: 'page-head' },
        h('div', {}, h('a', { href: '#/events', class: 'back' }, '← Events'),
          h('h1', {}, 'Event ', h('span', { class: 'mono', id: 'event-id' }, e.id), h('code', { class: 'type-pill' }, e.type)))),
      h('div', { class: 'grid-2' },
        h('div', { class: 'card' }, h('h3', {}, 'Event'), h('dl', { class: 'fields' },
          row('Type', e.type), row('Source', e.source), row('Created', fmtTime(e.createdAt)),
          row('Idempotency key', e.idempotencyKey),
          row('Jobs', e.jobs.length ? h('span', { class: 'job-counts' }, Object.entries(counts).map(([s, n]) => [statusChip(s), ` ${n} `])) : 'none'))),
        h('div', { class: 'card' }, h('h3', {}, 'Metadata'), meta.length
          ? h('table', { class: 'table table-kv', id: 'event-metadata' }, h('tbody', {}, meta.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v)))))
          : h('div', { class: 'muted' }, 'none'))),
      h('div', { class: 'card card-flush' }, h('h3', { class: 'card-title' }, `Jobs (${e.jobs.length})`), e.jobs.length
        ? h('div', { class: 'table-scroll' }, h('table', { class: 'table', id: 'event-jobs' },
          h('thead', {}, h('tr', {}, ['Job', 'Status', 'Subscription'].map((t) => h('th', {}, t)))),
          h('tbody', {}, e.jobs.map((j) => h('tr', { dataset: { id: j.id } },
            h('td', {}, h('a', { href: '#/jobs/' + j.id, class: 'mono job-link' }, j.id)),
            h('td', {}, statusChip(j.status)),
            h('td', {}, h('a', { href: '#/subscriptions/' + j.subscriptionId }, names[j.subscriptionId] || j.subscriptionId),
              names[j.subscriptionId] ? h('span', { class: 'muted small mono' }, ' ' + j.subscriptionId) : null))))))
        : empty('No jobs', 'No ACTIVE subscription matched this event when it was published.')),
      h('div', { class: 'card' }, h('h3', {}, 'Data'), h('pre', { class: 'code', id: 'event-data', dataset: { keep: 'data' } }, dataOf(raw, ['data'], e.data, 'pretty'))));
  }
  load();
  timer = setInterval(load, 5000);
  return () => { stopped = true; if (timer !== null) clearInterval(timer); };
}
