// DOM helpers. Every string becomes a text node: nothing that came from
// outside (payloads, response bodies, errors) is ever parsed as markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' || k === 'checked' || k === 'disabled') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function statusChip(status) {
  return h('span', { class: 'chip chip-' + String(status).toLowerCase().replace(/_/g, '-') }, status);
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function ago(iso) {
  if (!iso) return '';
  const s = Math.round((Date.now() - new Date(iso)) / 1000);
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.round(s / 60) + 'm ago';
  if (s < 86400) return Math.round(s / 3600) + 'h ago';
  return Math.round(s / 86400) + 'd ago';
}

// ms shows a duration in milliseconds. Below 1 ms it keeps a decimal
// (0.4 ms); a duration recorded in whole milliseconds (whole: an attempt's,
// and the percentiles of those) that is below 1 was under a millisecond.
export function ms(v, whole = false) {
  if (v === null || v === undefined) return '—';
  if (v < 1) {
    if (whole) return '<1 ms';
    return v < 0.05 ? '<0.1 ms' : v.toFixed(1) + ' ms';
  }
  if (v < 10) return (Math.round(v * 10) / 10) + ' ms';
  return v < 1000 ? Math.round(v) + ' ms' : (v / 1000).toFixed(2) + ' s';
}

// duration shows seconds as the two largest units (45 s, 3 min 12 s, 2 h 5 min, 3 d 4 h).
export function duration(seconds) {
  const s = Math.floor(seconds);
  if (s < 60) return s + ' s';
  const units = [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]];
  const i = units.findIndex(([, n]) => s >= n);
  const [u1, n1] = units[i];
  const [u2, n2] = units[i + 1];
  const a = Math.floor(s / n1);
  const b = Math.floor((s % n1) / n2);
  return b ? `${a} ${u1} ${b} ${u2}` : `${a} ${u1}`;
}

export function empty(title, hint) {
  return h('div', { class: 'empty' }, h('div', { class: 'empty-title' }, title), hint ? h('div', { class: 'empty-hint' }, hint) : null);
}

export function errorBox(err) {
  const details = (err && err.details) || [];
  return h('div', { class: 'alert alert-error', role: 'alert' },
    h('strong', {}, err && err.status ? `Error ${err.status}: ` : 'Error: '),
    (err && err.message) || String(err),
    details.length ? h('ul', {}, details.map((d) => h('li', {}, h('code', {}, d.field), ' ', d.message))) : null);
}

let toastTimer;
export function toast(msg, kind = 'ok') {
  let el = document.getElementById('toast');
  if (!el) {
    el = h('div', { id: 'toast', role: 'status' });
    document.body.append(el);
  }
  el.className = 'toast toast-' + kind + ' show';
  el.textContent = msg;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove('show'), 4000);
}

// prettyPayload shows JSON indented, anything else as it is (as text).
export function prettyPayload(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
