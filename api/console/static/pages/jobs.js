import { h, clear, rerender, errorBox, empty, statusChip, fmtTime, ago, ms, toast, prettyPayload, pager, total } from '../dom.js';
import * as api from '../api.js';
import { credentialsLabel } from './credentials.js';

const statuses = ['PENDING', 'IN_PROGRESS', 'COMPLETED', 'FAILED', 'ERROR', 'CANCELLED', 'EXPIRED'];
const finished = ['COMPLETED', 'ERROR', 'CANCELLED', 'EXPIRED'];

// filtersToQuery turns the form's state into the search API's query.
function filtersToQuery(f) {
  const q = new URLSearchParams();
  if (f.status.length) q.set('status', f.status.join(','));
  for (const k of ['source', 'type', 'groupId']) if (f[k]) q.set(k, f[k]);
  for (const k of ['createdAfter', 'createdBefore']) if (f[k]) q.set(k, new Date(f[k] + 'Z').toISOString());
  for (const [k, v] of f.metadata) q.set('metadata.' + k, v);
  if (f.page) q.set('page', String(f.page));
  if (f.before) q.set('before', f.before);
  return q;
}

// hashOf is the page's address for the form's state: the search, and
// refresh=0 when auto-refresh is off, so that a search or a page keeps it.
function hashOf(f) {
  const q = filtersToQuery(f);
  if (!f.refresh) q.set('refresh', '0');
  return '#/jobs' + (q.toString() ? '?' + q : '');
}

function filtersFromParams(p) {
  const f = { status: [], source: '', type: '', groupId: '', createdAfter: '', createdBefore: '', metadata: [], page: 0, before: '', refresh: true };
  if (p.get('status')) f.status = p.get('status').split(',');
  for (const k of ['source', 'type', 'groupId']) f[k] = p.get(k) || '';
  for (const k of ['createdAfter', 'createdBefore']) if (p.get(k)) f[k] = p.get(k).replace(/(\.\d+)?Z$/, '').slice(0, 16);
  for (const [k, v] of p) if (k.startsWith('metadata.')) f.metadata.push([k.slice(9), v]);
  f.page = Number(p.get('page') || 0);
  f.before = p.get('before') || '';
  f.refresh = p.get('refresh') !== '0';
  return f;
}

// parseMetadata reads the metadata filter: one key=value per line, so a
// value may hold commas (and any other character but a line break). A
// line that is not key=value is reported, not dropped: dropped, the search
// would be wider than the operator asked.
function parseMetadata(text, problems) {
  const out = [];
  for (const line of text.split('\n')) {
    const s = line.trim();
    if (!s) continue;
    const i = s.indexOf('=');
    if (i <= 0) { problems.push({ field: 'metadata', message: `"${s}" is not key=value (one pair per line)` }); continue; }
    out.push([s.slice(0, i).trim(), s.slice(i + 1).trim()]);
  }
  return out;
}

function jobsTable(items) {
  return h('div', { class: 'table-scroll' }, h('table', { class: 'table table-jobs', id: 'jobs-table' },
    h('thead', {}, h('tr', {}, ['Job', 'Status', 'Source / type', 'Target', 'Attempts', 'Created', 'Last error'].map((c) => h('th', {}, c)))),
    h('tbody', {}, items.map((j) => h('tr', { dataset: { id: j.id } },
      h('td', {}, h('a', { href: '#/jobs/' + j.id, class: 'mono job-link' }, j.id)),
      h('td', {}, statusChip(j.status)),
      h('td', {}, h('div', {}, j.source), h('div', { class: 'muted small' }, j.type)),
      h('td', { class: 'truncate', title: j.targetUrl }, j.targetUrl),
      h('td', { class: 'num' }, `${j.attemptCount} / ${j.maxRetries}`),
      h('td', { title: fmtTime(j.createdAt) }, ago(j.createdAt)),
      h('td', { class: 'truncate error-text', title: j.lastError || '' }, j.lastError || ''))))));
}

export function jobsPage(main, params) {
  const f = filtersFromParams(params);
  const chips = h('div', { class: 'chips', role: 'group', 'aria-label': 'Status' }, statuses.map((s) => {
    const on = f.status.includes(s);
    return h('button', { type: 'button', class: 'chip-toggle chip-' + s.toLowerCase().replace('_', '-') + (on ? ' on' : ''), 'aria-pressed': String(on), dataset: { status: s },
      onclick: (ev) => { ev.currentTarget.classList.toggle('on'); ev.currentTarget.setAttribute('aria-pressed', String(ev.currentTarget.classList.contains('on'))); submit(); } }, s);
  }));
  const formStatus = h('div', { id: 'job-filters-status' }); // a filter that could not be read
  // Enter searches, as in the other fields; Shift+Enter starts another pair.
  const metadata = h('textarea', { name: 'metadata', id: 'f-metadata', rows: Math.max(2, f.metadata.length),
    value: f.metadata.map(([k, v]) => `${k}=${v}`).join('\n'), placeholder: 'tenant=Acme, Inc.\norderId=1234',
    onkeydown: (ev) => { if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(); } } });
  const field = (name, label, value, type = 'text', placeholder = '') => h('label', { class: 'field' }, h('span', {}, label),
    h('input', { name, type, value, placeholder, id: 'f-' + name }));
  const form = h('form', { class: 'filters card', id: 'job-filters' },
    chips,
    h('div', { class: 'filter-row' },
      field('source', 'Source', f.source), field('type', 'Type', f.type), field('groupId', 'Group', f.groupId),
      field('createdAfter', 'Created after (UTC)', f.createdAfter, 'datetime-local'),
      field('createdBefore', 'Created before (UTC)', f.createdBefore, 'datetime-local')),
    h('div', { class: 'filter-row' },
      h('label', { class: 'field field-wide' }, h('span', {}, 'Metadata (one key=value per line, Shift+Enter for the next; a value may contain commas; all must match)'),
        metadata),
      h('div', { class: 'filter-actions' },
        h('button', { type: 'submit', class: 'btn btn-primary', id: 'search' }, 'Search'),
        h('button', { type: 'button', class: 'btn btn-ghost', onclick: () => { location.hash = auto.checked ? '#/jobs' : '#/jobs?refresh=0'; } }, 'Clear'))),
    formStatus);
  // Auto-refresh is on unless the address says refresh=0: a search, a
  // status chip or a page keeps the choice. Ticking it changes the address
  // in place (no reload).
  const auto = h('input', { type: 'checkbox', id: 'auto-refresh', checked: f.refresh,
    onchange: () => { f.refresh = auto.checked; history.replaceState(history.state, '', hashOf(f)); } });
  const results = h('div', { id: 'jobs-results' }, h('div', { class: 'loading' }, 'Loading…'));
  clear(main, h('div', { class: 'page-head' }, h('h1', {}, 'Jobs'),
    h('label', { class: 'toggle' }, auto, ' Auto-refresh every 5 s')), form, results);

  // fromForm is the search the form asks for (its first page), or null
  // when a filter cannot be read: the form says why.
  function fromForm() {
    const fd = new FormData(form);
    const problems = [];
    const metadata = parseMetadata(fd.get('metadata'), problems);
    if (problems.length) {
      clear(formStatus, errorBox({ message: 'The metadata filter could not be read', details: problems }));
      return null;
    }
    clear(formStatus);
    return {
      status: [...chips.querySelectorAll('.on')].map((b) => b.dataset.status),
      source: fd.get('source').trim(), type: fd.get('type').trim(), groupId: fd.get('groupId').trim(),
      createdAfter: fd.get('createdAfter'), createdBefore: fd.get('createdBefore'),
      metadata, page: 0, before: '', refresh: auto.checked,
    };
  }
  function go(next) {
    const target = hashOf(next);
    if (location.hash === target) load(); else location.hash = target;
  }
  function submit() {
    const next = fromForm();
    if (next) go(next);
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); submit(); });

  // load shows the search the address holds (f). Newer and Older page
  // through that search, not through what the form holds now: an edit
  // not searched yet changes no page.
  async function load() {
    const q = filtersToQuery(f);
    if (!q.has('size')) q.set('size', '25');
    try {
      const res = await api.get('/api/dispatch/jobs?' + q);
      rerender(results, res.items.length
        ? h('div', { class: 'card card-flush' }, jobsTable(res.items), pager(res, 'job', f, (at) => go({ ...f, ...at }), 'jobs'))
        : h('div', { class: 'card' }, empty('No jobs match these filters', 'Widen the filters or clear them.')));
    } catch (e) {
      clear(results, errorBox(e));
    }
  }
  load();
  const timer = setInterval(() => { if (auto.checked) load(); }, 5000);
  return () => clearInterval(timer);
}

// jobPage shows one job. It refreshes every 5 s until the job has
// finished; a refresh redraws only what changed, so a folded section the
// reader opened stays open and a scrolled payload stays where it was. An
// action's error stays until the next action.
export function jobPage(main, id) {
  const top = h('div', {}, h('div', { class: 'loading' }, 'Loading…'));
  const notes = h('div', { id: 'job-notes' }); // an action's outcome: a refresh leaves it
  const stale = h('div', { id: 'job-stale' }); // a refresh that failed, until one succeeds
  const rest = h('div', {});
  clear(main, top, notes, stale, rest);
  let stopped = false;
  let shown = null; // the answers the page shows, to skip a redraw that would change nothing
  let timer = null;
  async function load() {
    let job, attempts, creds = null, seen;
    try {
      const [j, a] = await Promise.all([api.getWithText('/api/dispatch/jobs/' + encodeURIComponent(id)),
        api.getWithText('/api/dispatch/jobs/' + encodeURIComponent(id) + '/attempts')]);
      [job, attempts] = [j.data, a.data];
      // The credentials' name: the console's session may read them; an
      // API token alone may not, and they may have been deleted.
      if (job.credentialsId) creds = await api.get('/api/admin/dispatch/credentials/' + job.credentialsId).catch(() => null);
      seen = JSON.stringify([j.text, a.text, creds && creds.name]);
    } catch (e) {
      if (stopped) return;
      if (shown === null) {
        clear(top, h('div', { class: 'page-head' }, h('h1', {}, 'Job ', h('span', { class: 'mono' }, id))));
        clear(rest, errorBox(e));
      } else {
        clear(stale, errorBox(e));
      }
      return;
    }
    if (stopped) return;
    clear(stale);
    if (finished.includes(job.status) && timer !== null) { clearInterval(timer); timer = null; }
    if (seen === shown) return;
    shown = seen;
    render(job, attempts, creds);
  }
  function render(job, attempts, creds) {
    const actions = h('div', { class: 'actions' });
    if (job.status === 'PENDING' || job.status === 'FAILED') {
      actions.append(h('button', { class: 'btn btn-danger', id: 'cancel', onclick: (e) => act('cancel', e.currentTarget) }, 'Cancel job'));
    }
    if (finished.includes(job.status)) {
      actions.append(h('button', { class: 'btn btn-primary', id: 'replay', onclick: (e) => act('replay', e.currentTarget) }, 'Replay'));
    }
    const row = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' || v === null ? '—' : v)];
    const kv = (obj, id) => Object.keys(obj).length
      ? h('table', { class: 'table table-kv', id }, h('tbody', {}, Object.entries(obj).map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v)))))
      : h('div', { class: 'muted' }, 'none');
    rerender(top,
      h('div', { class: 'page-head' },
        h('div', {}, h('a', { href: '#/jobs', class: 'back' }, '← Jobs'),
          h('h1', {}, 'Job ', h('span', { class: 'mono', id: 'job-id' }, job.id), ' ', h('span', { id: 'job-status' }, statusChip(job.status)))),
        actions));
    rerender(rest,
      job.lastError ? h('div', { class: 'alert alert-warn', id: 'last-error' }, h('strong', {}, 'Last error: '), job.lastError) : null,
      h('div', { class: 'grid-2' },
        h('div', { class: 'card' }, h('h3', {}, 'Job'), h('dl', { class: 'fields' },
          row('Source', job.source), row('Type', job.type), row('Target', h('span', { class: 'mono break' }, job.targetUrl)),
          row('Group', job.groupId), row('External id', job.externalId),
          row('Attempts', `${job.attemptCount} of ${job.maxRetries} (${job.retryStrategy})`),
          row('Created', fmtTime(job.createdAt)), row('Updated', fmtTime(job.updatedAt)),
          row('Scheduled for', job.scheduledFor && fmtTime(job.scheduledFor)), row('Expires', job.expiresAt && fmtTime(job.expiresAt)),
          row('Next attempt', job.nextAttemptAt && fmtTime(job.nextAttemptAt)), row('Completed', job.completedAt && fmtTime(job.completedAt)),
          row('Credentials', job.credentialsId && h('a', { href: '#/credentials', id: 'job-credentials' },
            creds ? credentialsLabel(creds) : h('span', { class: 'mono' }, job.credentialsId))),
          row('Idempotency key', job.idempotencyKey),
          row('Replay of', job.replayOf && h('a', { href: '#/jobs/' + job.replayOf, class: 'mono' }, job.replayOf)),
          job.eventId ? row('Event', h('a', { href: '#/events/' + job.eventId, class: 'mono', id: 'job-event' }, job.eventId)) : null,
          job.subscriptionId ? row('Subscription', h('a', { href: '#/subscriptions/' + job.subscriptionId, class: 'mono' }, job.subscriptionId)) : null)),
        h('div', {},
          h('div', { class: 'card' }, h('h3', {}, 'Metadata'), kv(job.metadata, 'job-metadata')),
          h('div', { class: 'card' }, h('h3', {}, 'Headers'), kv(job.headers, 'job-headers')))),
      h('div', { class: 'card' }, h('h3', {}, 'Payload ', h('span', { class: 'muted small' }, job.payloadContentType)),
        h('pre', { class: 'code', id: 'payload', dataset: { keep: 'payload' } }, prettyPayload(job.payload))),
      h('div', { class: 'card' }, h('h3', {}, `Attempts (${attempts.length})`), timeline(attempts)));
  }
  // act replays or cancels the job; its button stays disabled meanwhile,
  // so a double click is one replay, not two. A refusal stays on the page
  // (refreshes leave it) until the next action; the page then shows the
  // job as it is, the reason it was refused.
  async function act(what, button) {
    if (button) button.disabled = true;
    clear(notes);
    try {
      const j = await api.post(`/api/dispatch/jobs/${encodeURIComponent(id)}/${what}`);
      if (what === 'replay') {
        toast(`Replayed as job ${j.id}`);
        if (main.isConnected) location.hash = '#/jobs/' + j.id; // not when the operator opened another page meanwhile
        return;
      }
      toast('Job cancelled');
    } catch (e) {
      clear(notes, errorBox(e));
    } finally {
      if (button) button.disabled = false;
    }
    load();
  }
  load();
  timer = setInterval(load, 5000);
  return () => { stopped = true; if (timer !== null) clearInterval(timer); };
}

function timeline(attempts) {
  if (!attempts.length) return empty('No attempts yet', 'The job has not been delivered yet.');
  return h('ol', { class: 'timeline', id: 'attempts' }, attempts.map((a) => h('li', { class: 'tl-item tl-' + a.status.toLowerCase().replace('_', '-') },
    h('div', { class: 'tl-head' },
      h('strong', {}, `#${a.attemptNumber}`), statusChip(a.status),
      a.responseCode ? h('span', { class: 'code-badge' }, 'HTTP ' + a.responseCode) : null,
      h('span', { class: 'muted' }, ms(a.durationMillis, true)),
      h('span', { class: 'muted', title: a.attemptedAt }, fmtTime(a.attemptedAt))),
    a.errorMessage ? h('div', { class: 'error-text attempt-error' }, a.errorMessage) : null,
    a.responseBody ? h('pre', { class: 'code code-sm attempt-body', dataset: { keep: 'body-' + a.attemptNumber } }, a.responseBody) : null,
    attemptHeaders(a))));
}

// attemptHeaders shows the headers an attempt sent (its secrets were
// redacted before they were stored) and the ones it got back, folded.
function attemptHeaders(a) {
  const sent = a.requestHeaders || {};
  const got = a.responseHeaders || {};
  const ns = Object.keys(sent).length;
  const ng = Object.keys(got).length;
  if (!ns && !ng) return null;
  const table = (title, hs, cls) => h('div', { class: 'headers-half ' + cls }, h('div', { class: 'headers-title' }, title),
    Object.keys(hs).length
      ? h('table', { class: 'table table-kv table-headers' }, h('tbody', {}, Object.keys(hs).sort((x, y) => x.localeCompare(y))
        .map((k) => h('tr', {}, h('th', {}, k), h('td', { class: hs[k] === '[redacted]' ? 'redacted' : null }, hs[k])))))
      : h('div', { class: 'muted small' }, 'none'));
  return h('details', { class: 'attempt-headers', dataset: { keep: 'headers-' + a.attemptNumber } },
    h('summary', {}, `Headers: ${ns} sent, ${ng} received`),
    h('div', { class: 'headers-grid' },
      table('Request (secrets redacted)', sent, 'request-headers'),
      table('Response', got, 'response-headers')));
}

export function deadLettersPage(main) {
  const results = h('div', { id: 'dead-results' }, h('div', { class: 'loading' }, 'Loading…'));
  const panel = h('div', { id: 'redrive' });
  const replayBtn = h('button', { class: 'btn btn-primary', id: 'bulk-replay', onclick: dryRun }, 'Replay dead letters…');
  clear(main, h('div', { class: 'page-head' }, h('div', {}, h('h1', {}, 'Dead letters'),
    h('div', { class: 'muted' }, 'Jobs in ERROR: retries exhausted or not retryable. Replaying creates new jobs; each dead letter is replayed once.')), replayBtn),
  panel, results);

  let deadTotal = 0;
  let lastDry = null; // the dry run's answer: a run replays at most wouldReplay of matched
  async function dryRun() {
    try {
      const r = await api.post('/api/dispatch/jobs/replay?status=ERROR&dryRun=true');
      lastDry = r;
      if (!r.matched) {
        clear(panel, h('div', { class: 'alert alert-info', id: 'dry-run' },
          'Nothing to replay: every dead letter has been replayed already, or its credentials were deleted.'));
        return;
      }
      const skipped = deadTotal - r.matched;
      clear(panel, h('div', { class: 'alert alert-info', id: 'dry-run' },
        h('strong', { id: 'dry-run-count' }, `${r.wouldReplay} dead letter${r.wouldReplay === 1 ? '' : 's'} will be replayed`),
        r.matched > r.wouldReplay ? ` (${r.matched} match; one run replays at most ${r.wouldReplay}).` : '.',
        skipped > 0 ? ` ${skipped} ${skipped === 1 ? 'is' : 'are'} skipped: replayed before, or ${skipped === 1 ? 'its' : 'their'} credentials deleted.` : '',
        ' ', h('button', { class: 'btn btn-primary', id: 'confirm-replay', onclick: (ev) => replay(ev.currentTarget) }, `Replay ${r.wouldReplay}`),
        ' ', h('button', { class: 'btn btn-ghost', onclick: () => clear(panel) }, 'Cancel')));
    } catch (e) {
      clear(panel, errorBox(e));
    }
  }
  // replay runs the redrive. Its button stays disabled until the answer,
  // so a double click is one redrive, and the outcome shown is its own.
  async function replay(button) {
    button.disabled = true;
    try {
      const r = await api.post('/api/dispatch/jobs/replay?status=ERROR');
      const failed = r.failed || [];
      clear(panel, h('div', { class: failed.length ? 'alert alert-warn' : 'alert alert-ok', id: 'replayed' },
        `Replayed ${r.replayed} dead letter${r.replayed === 1 ? '' : 's'} as new jobs.`,
        failed.length ? h('span', { id: 'replay-failed' },
          ` ${failed.length} could not be: ${failed[0].error.message}${failed.length > 1 ? ` (and ${failed.length - 1} more)` : ''}.`) : '',
        r.more || (lastDry && lastDry.matched > r.replayed + failed.length)
          ? h('span', { id: 'replay-more' }, ' More remain: replay again for the next run.') : ''));
      toast(`Replayed ${r.replayed}`);
      load();
    } catch (e) {
      clear(panel, errorBox(e));
    }
  }
  async function load() {
    try {
      const res = await api.get('/api/dispatch/jobs?status=ERROR&size=50');
      deadTotal = res.totalItems;
      rerender(results, res.items.length
        ? h('div', { class: 'card card-flush' }, jobsTable(res.items),
          h('div', { class: 'pager' }, h('span', { class: 'muted', id: 'dead-count' }, `${total(res)} dead letter${res.totalItems === 1 && res.totalExact !== false ? '' : 's'}`),
            res.totalPages > 1 ? h('a', { href: '#/jobs?status=ERROR', class: 'btn' }, 'All in Jobs →') : null))
        : h('div', { class: 'card' }, empty('No dead letters', 'Every job has been delivered or is still being retried.')));
    } catch (e) {
      clear(results, errorBox(e));
    }
  }
  load();
  const timer = setInterval(load, 10000);
  return () => clearInterval(timer);
}
