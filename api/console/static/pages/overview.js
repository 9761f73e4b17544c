import uPlot from '../vendor/uplot/uPlot.esm.js';
import { h, clear, errorBox, empty, ms, fmtTime, duration, statusChip, total } from '../dom.js';
import * as api from '../api.js';

const outcomes = [
  { key: 'success', label: 'Success', color: '#1f9d55' },
  { key: 'failure', label: 'Failure', color: '#d97706' },
  { key: 'timeout', label: 'Timeout', color: '#7c3aed' },
  { key: 'networkError', label: 'Network error', color: '#dc2626' },
  { key: 'blocked', label: 'Blocked', color: '#6b7280' },
];

function card(label, value, sub, id) {
  return h('div', { class: 'card stat', id }, h('div', { class: 'stat-label' }, label),
    h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-sub' }, sub || ''));
}

// utc is uPlot's clock for the charts: UTC, as every other time in the
// console and the "Created after (UTC)" filters (uPlot's default is the
// browser's time zone).
const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC');

function chart(el, title, series, data, yLabel) {
  const box = h('div', { class: 'card chart' }, h('h3', {}, title));
  el.append(box);
  const width = Math.max(300, box.clientWidth - 34); // the card's inner width, once laid out
  const opts = {
    width, height: 220,
    tzDate: utc,
    scales: { x: { time: true } },
    axes: [{ stroke: '#6b7280', grid: { stroke: '#eef0f3' } },
      { stroke: '#6b7280', grid: { stroke: '#eef0f3' }, label: yLabel, size: 60 }],
    legend: { live: true },
    series: [{ label: 'Time (UTC)' }, ...series.map((x) => ({ points: { show: false }, ...x }))],
  };
  return new uPlot(opts, data, box);
}

export function overviewPage(main) {
  const updated = h('span', { class: 'muted', id: 'overview-updated' }, 'Last hour, per minute');
  const header = h('div', { class: 'page-head' }, h('h1', {}, 'Overview'), updated);
  const body = h('div', { id: 'overview' }, h('div', { class: 'loading' }, 'Loading…'));
  clear(main, header, body);
  let plots = [];
  let stopped = false;

  async function load() {
    let stats, dead, mon, storage, backlog;
    try {
      [stats, dead, mon, storage, backlog] = await Promise.all([
        api.get('/api/dispatch/stats?window=1h&bucket=1m'),
        api.get('/api/dispatch/jobs?status=ERROR&size=1'),
        api.get('/api/dispatch/monitoring'),
        api.get('/api/dispatch/storage'),
        api.get('/api/dispatch/backlog'),
      ]);
    } catch (e) {
      if (!stopped) clear(body, errorBox(e));
      return;
    }
    if (stopped) return;
    plots.forEach((p) => p.destroy());
    plots = [];
    const t = stats.totals;
    const pct = (r) => (r === null ? '—' : (Math.floor(r * 1000 + 1e-6) / 10).toFixed(1) + '%');
    const finished = t.jobsDelivered + t.jobsFailed;
    const cards = h('div', { class: 'cards' },
      card('Deliveries', t.attempts.toLocaleString(), 'attempts in the last hour', 'card-attempts'),
      card('Success rate', pct(t.jobSuccessRate), finished
        ? `${t.jobsDelivered.toLocaleString()} of ${finished.toLocaleString()} finished job${finished === 1 ? '' : 's'} delivered · ${pct(t.successRate)} of attempts`
        : 'no job finished in the last hour', 'card-success'),
      card('Latency p50', ms(t.p50Millis, true), 'per attempt', 'card-p50'),
      card('Latency p99', ms(t.p99Millis, true), 'per attempt', 'card-p99'),
      h('a', { href: '#/dead-letters', class: 'card stat card-link', id: 'card-dead' },
        h('div', { class: 'stat-label' }, 'Dead letters'),
        h('div', { class: 'stat-value' + (dead.totalItems ? ' stat-bad' : '') }, total(dead)),
        h('div', { class: 'stat-sub' }, 'jobs in ERROR')));
    const charts = h('div', { class: 'charts' });
    clear(body, cards, backlogCard(backlog), charts, routersCard(mon), h('div', { class: 'grid-overview' }, storageCard(storage), breakersCard(mon)));
    const xs = stats.buckets.map((b) => Date.parse(b.start) / 1000);
    if (t.attempts === 0) {
      charts.append(h('div', { class: 'card' }, empty('No deliveries in the last hour',
        'Create a job with POST /api/dispatch/jobs and its attempts show here.')));
    } else {
      // Stacked bars: success at the bottom. Each series is drawn at its
      // running total, tallest first, so the smaller ones paint over it;
      // the legend shows each outcome's own count.
      const raw = outcomes.map((o) => stats.buckets.map((b) => b[o.key]));
      const stacked = raw.map((_, k) => stats.buckets.map((_, i) => raw.slice(0, k + 1).reduce((s, r) => s + r[i], 0)));
      const order = outcomes.map((_, k) => k).reverse();
      const bars = uPlot.paths.bars({ size: [0.7, 40] });
      plots.push(chart(charts, 'Deliveries per minute by outcome',
        order.map((k) => ({ label: outcomes[k].label, stroke: outcomes[k].color, fill: outcomes[k].color, width: 0, paths: bars,
          value: (u, v, si, idx) => (idx === null || idx === undefined ? '—' : raw[k][idx]) })),
        [xs, ...order.map((k) => stacked[k])], 'attempts'));
      plots.push(chart(charts, 'Delivery latency',
        [{ label: 'p50', stroke: '#2563eb', width: 2, value: (u, v) => ms(v, true), points: { show: true, size: 5 } },
          { label: 'p99', stroke: '#db2777', width: 2, value: (u, v) => ms(v, true), points: { show: true, size: 5 } }],
        [xs, stats.buckets.map((b) => b.p50Millis), stats.buckets.map((b) => b.p99Millis)], 'ms'));
    }
    updated.textContent = `Last hour, per minute · updated ${new Date().toISOString().slice(11, 19)} UTC`;
  }

  load();
  const timer = setInterval(load, 15000);
  return () => { stopped = true; clearInterval(timer); plots.forEach((p) => p.destroy()); };
}

// routersCard shows every router as it last reported itself to the
// database: each running one with its pools, its queues, the messages it
// holds and its latest warnings; then those that stopped or went silent,
// one line each. A router of a version that reports its pools only shows
// them alone.
function routersCard(mon) {
  const title = h('h3', {}, 'Routers');
  if (!mon.routers.length) {
    return h('div', { class: 'card', id: 'pools' }, title, empty('No router has reported',
      'Each router (dispatch router or dispatch all) reports its pools, queues and warnings to the database every 5 s; a router needs DATABASE_URL for that.'));
  }
  const up = mon.routers.filter((r) => r.state === 'UP');
  const down = mon.routers.filter((r) => r.state !== 'UP');
  return h('div', { class: 'card', id: 'pools' }, title,
    up.map((r) => h('div', { class: 'router', dataset: { router: r.id } },
      h('div', { class: 'router-head' }, h('strong', { class: 'router-host' }, r.host), ' ', statusChip(r.state),
        h('span', { class: 'muted small' }, ` ${r.id} · ${r.version} · up ${duration(Math.max(0, (Date.parse(r.reportedAt) - Date.parse(r.startedAt)) / 1000 + r.silentSeconds))} · reported ${duration(r.silentSeconds)} ago`)),
      h('div', { class: 'router-section' }, h('div', { class: 'router-label' }, 'Pools'), poolsTable(r.pools)),
      r.queues ? [
        h('div', { class: 'router-section' }, h('div', { class: 'router-label' }, 'Queues'), queuesTable(r.queues)),
        h('div', { class: 'router-section' }, h('div', { class: 'router-label' }, 'Messages held'), inFlightLine(r.inFlight)),
        h('div', { class: 'router-section' }, h('div', { class: 'router-label' }, 'Warnings'), warningsList(r.warnings)),
      ] : h('div', { class: 'router-section muted small router-old' },
        `This router runs ${r.version}, which reports its pools only: its queues, held messages and warnings are on its own listener (/monitoring/queues, /monitoring/in-flight, /monitoring/warnings).`))),
    down.length ? h('div', { class: 'routers-down' }, down.map((r) => h('div', { class: 'router router-down small', dataset: { router: r.id } },
      statusChip(r.state), ' ', h('strong', {}, r.host), h('span', { class: 'muted' }, ` ${r.id} · `,
        r.state === 'STOPPED' ? `stopped ${fmtTime(r.stoppedAt)}` : `silent for ${duration(r.silentSeconds)}, last heard ${fmtTime(r.reportedAt)}`)))) : null);
}

// queuesTable: each queue the router consumes, with its depth as SQS
// approximates it (read at the router's report) and the router's receives.
function queuesTable(queues) {
  if (!queues.length) return empty('No queues');
  const count = (n) => (n === undefined ? '—' : n.toLocaleString());
  return h('table', { class: 'table table-queues' },
    h('thead', {}, h('tr', {}, ['Queue', 'Status', 'Waiting', 'In flight', 'Delayed', 'Held here', 'Receives', 'Errors'].map((c) => h('th', {}, c)))),
    h('tbody', {}, queues.map((q) => {
      const d = q.depth || {};
      const unread = q.depth ? null : (q.depthError || 'not read yet');
      return h('tr', { dataset: { queue: q.name } },
        h('td', { class: 'queue-name' }, h('code', { title: q.url || q.name }, q.name),
          q.lastError ? h('div', { class: 'error-text small queue-error', title: q.lastError }, q.lastError) : null),
        h('td', {}, statusChip(q.status)),
        h('td', { class: 'num', title: unread || `read ${fmtTime(q.depthAt)}` }, count(d.visible)),
        h('td', { class: 'num', title: unread || 'received by any consumer, not deleted yet' }, count(d.inFlight)),
        h('td', { class: 'num', title: unread || '' }, count(d.delayed)),
        h('td', { class: 'num', title: 'buffered or mediating in this router' }, q.held.toLocaleString()),
        h('td', { class: 'num' }, q.receives.toLocaleString(), h('span', { class: 'muted small' }, ` (${q.messagesReceived.toLocaleString()} msgs)`)),
        h('td', { class: 'num' + (q.receiveErrors ? ' error-text' : '') }, q.receiveErrors.toLocaleString()));
    })));
}

// inFlightLine: how many messages the router holds and how long it has
// held the oldest, linking to its job.
function inFlightLine(f) {
  if (!f || !f.count) return h('div', { class: 'router-in-flight muted' }, 'No message held');
  const o = f.oldest;
  return h('div', { class: 'router-in-flight' },
    h('strong', {}, `${f.count.toLocaleString()} message${f.count === 1 ? '' : 's'}`),
    ` (${f.mediating.toLocaleString()} mediating, ${f.buffered.toLocaleString()} buffered)`,
    o ? [' · oldest ', h('strong', { class: 'oldest-age' }, duration(o.ageMillis / 1000)), ': job ',
      h('a', { href: '#/jobs/' + encodeURIComponent(o.jobId), class: 'mono' }, o.jobId),
      h('span', { class: 'muted' }, ' ' + heldWhere(o))] : null);
}

// heldWhere: a held message's state, group (an ungrouped job is its own,
// not worth naming), pool, and queue, or that it came from none: a new
// job handed to the router at creation (in process in dispatch all, or
// offered by the API in split mode).
function heldWhere(o) {
  return [o.state.toLowerCase(), o.groupId && o.groupId !== o.jobId ? 'group ' + o.groupId : null, 'pool ' + o.pool,
    o.queue ? 'queue ' + o.queue : 'handed over at creation, no queue'].filter(Boolean).join(', ');
}

// warningsList: the router's latest warnings, the latest first; repeats
// of one are counted.
function warningsList(ws) {
  if (!ws || !ws.length) return h('div', { class: 'router-warnings muted' }, 'No warnings');
  const shown = ws.slice(0, 5);
  return h('div', { class: 'router-warnings' },
    h('table', { class: 'table table-warnings' },
      h('tbody', {}, shown.map((w) => h('tr', { dataset: { type: w.type } },
        h('td', {}, h('span', { class: 'chip chip-warning' }, w.type)),
        h('td', { class: 'warning-message' }, w.message,
          w.jobId ? [' · job ', h('a', { href: '#/jobs/' + encodeURIComponent(w.jobId), class: 'mono' }, w.jobId)] : null),
        h('td', { class: 'num muted' }, w.count > 1 ? `×${w.count.toLocaleString()}` : ''),
        h('td', { class: 'nowrap muted small', title: `first ${fmtTime(w.firstAt)}` }, fmtTime(w.lastAt)))))),
    ws.length > shown.length ? h('div', { class: 'muted small' }, `and ${ws.length - shown.length} older (the router's /monitoring/warnings lists them all)`) : null);
}

function poolsTable(pools) {
  if (!pools.length) return empty('No pools');
  return h('table', { class: 'table' },
    h('thead', {}, h('tr', {}, ['Pool', 'In flight', 'Buffered', 'Succeeded', 'Retried', 'Failed', 'Avg'].map((c) => h('th', {}, c)))),
    h('tbody', {}, pools.map((p) => h('tr', { dataset: { pool: p.code } },
      h('td', {}, h('code', {}, p.code)),
      h('td', {}, h('div', { class: 'meter' }, h('progress', { max: p.concurrency, value: p.inFlight }), ` ${p.inFlight} / ${p.concurrency}`)),
      h('td', {}, p.buffered), h('td', {}, p.succeeded.toLocaleString()), h('td', {}, p.retried.toLocaleString()),
      h('td', {}, p.failed.toLocaleString()),
      h('td', { class: 'nowrap' }, p.succeeded + p.retried + p.failed ? ms(p.avgMediationMillis) : '—')))));
}

// backlogCard: how far delivery is behind, each number linking to its jobs.
function backlogCard(b) {
  const item = (id, label, value, sub, href, bad) => h(href ? 'a' : 'div', { class: 'mini' + (href ? ' card-link' : ''), id, href },
    h('div', { class: 'mini-value' + (bad ? ' stat-bad' : '') }, value), h('div', { class: 'mini-label' }, label),
    h('div', { class: 'mini-sub' }, sub));
  const waited = b.oldestDueAt ? duration(b.oldestWaitSeconds) : '—';
  const q = b.queue;
  return h('div', { class: 'card', id: 'backlog' }, h('h3', {}, 'Backlog'),
    h('div', { class: 'minis' },
      item('backlog-pending', 'Pending', b.pending.toLocaleString(), 'never attempted', '#/jobs?status=PENDING'),
      item('backlog-in-progress', 'In progress', b.inProgress.toLocaleString(), 'being delivered', '#/jobs?status=IN_PROGRESS'),
      item('backlog-failed', 'Failed', b.failed.toLocaleString(), 'waiting for a retry', '#/jobs?status=FAILED'),
      item('backlog-unsent', 'Unsent pointers', b.unsent.toLocaleString(), 'due, not on the queue yet', null, b.unsent > 0 && b.oldestWaitSeconds > 60),
      item('backlog-oldest', 'Oldest wait', waited, b.oldestDueAt ? 'due since ' + fmtTime(b.oldestDueAt) : 'no due job waits', null, b.oldestWaitSeconds > 60),
      q ? item('backlog-queue', 'On the queue', q.visible.toLocaleString(),
        [`${q.inFlight.toLocaleString()} in flight · ${q.delayed.toLocaleString()} delayed`, h('div', { class: 'mono truncate', title: q.name }, q.name)], null)
        : item('backlog-queue', 'On the queue', '—', b.queueError || 'not read', null, true)));
}

function bytes(n) {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
}

// storageCard: what the history takes and when it is next trimmed.
function storageCard(st) {
  const rows = [
    ['Database', bytes(st.databaseBytes)],
    ['Oldest job kept', st.oldestJobAt ? fmtTime(st.oldestJobAt) : '—'],
    ['Last purge', st.lastUpkeep ? fmtTime(st.lastUpkeep) + ` (${st.lastDropped} partitions dropped)` : 'not yet'],
    ['Next purge', st.nextUpkeep ? fmtTime(st.nextUpkeep) : '—'],
  ];
  if (st.heldPartitions) rows.push(['Held for live jobs', `${st.heldPartitions} partitions past retention`]);
  if (st.lastError) rows.push(['Last upkeep error', st.lastError]);
  return h('div', { class: 'card', id: 'storage' }, h('h3', {}, 'Storage'),
    h('table', { class: 'table' },
      h('tbody', {}, rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))))),
    h('table', { class: 'table' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Table'), h('th', {}, 'Rows'), h('th', {}, 'Size'))),
      h('tbody', {}, st.tables.map((t) => h('tr', {}, h('td', {}, h('code', {}, t.name)),
        h('td', {}, t.rows.toLocaleString()), h('td', {}, bytes(t.bytes)))))));
}

function breakersCard(mon) {
  const title = h('h3', {}, 'Open circuit breakers');
  if (!mon.breakers.length) return h('div', { class: 'card', id: 'breakers' }, title, empty('All targets closed', 'No target host is being held back.'));
  return h('div', { class: 'card', id: 'breakers' }, title,
    h('table', { class: 'table' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Host'), h('th', {}, 'Open until'))),
      h('tbody', {}, mon.breakers.map((b) => h('tr', {}, h('td', {}, h('code', {}, b.host)), h('td', {}, fmtTime(b.openUntil)))))));
}
