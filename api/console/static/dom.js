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

// total is a list's count of matches as the API gives it: exact up to its
// cap (10,000), past it "10,000+" (totalExact false).
export function total(res) {
  return res.totalItems.toLocaleString() + (res.totalExact === false ? '+' : '');
}

// pager says how many items match and which page this is, with Newer and
// Older; go({ page, before }) opens another. at is where this page is
// ({ page, before }). Past the count's cap Older stays on while pages come
// back full, and a page past the cap is read by keyset (before=nextBefore,
// as the API asks; the page numbers start again from it). name prefixes
// the ids of the count and the buttons.
export function pager(res, noun, at, go, name = noun) {
  const { page, size, totalItems, totalPages, nextBefore } = res;
  const exact = res.totalExact !== false;
  const before = at.before || '';
  const byPage = page + 1 < totalPages && (exact || (page + 2) * size <= totalItems);
  const more = byPage || (!exact && !!nextBefore);
  const nouns = exact && totalItems === 1 ? noun : noun + 's';
  return h('div', { class: 'pager' },
    h('span', { class: 'muted', id: name + '-count' }, `${total(res)} ${nouns}${before ? ` older than ${noun} ${before}` : ''}`,
      ` · page ${totalPages ? page + 1 : 0} of ${totalPages}${exact ? '' : '+'}`),
    before && page === 0
      ? h('button', { class: 'btn', type: 'button', id: name + '-newer', onclick: () => go({ page: 0, before: '' }) }, '← Newest')
      : h('button', { class: 'btn', type: 'button', id: name + '-newer', disabled: page <= 0, onclick: () => go({ page: page - 1, before }) }, '← Newer'),
    h('button', { class: 'btn', type: 'button', id: name + '-older', disabled: !more,
      onclick: () => go(byPage ? { page: page + 1, before } : { page: 0, before: nextBefore }) }, 'Older →'));
}

// JSON as written. JSON.parse turns every number into a double, so
// 12345678901234567891 reads 12345678901234567000 and 1.50 reads 1.5: a
// payload or an event's data is shown from its text instead. rawJSON reads
// the text into a tree that knows where each value is written; a number,
// true, false and null are shown exactly as written, a string as
// JSON.stringify writes it (the same string: \u003c reads <).

const jsonString = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const jsonLiteral = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null/y;

// parseTree reads one JSON value of text and nothing else; it throws a
// SyntaxError when text is not JSON.
function parseTree(text) {
  let i = 0;
  const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
  const fail = () => { throw new SyntaxError('not JSON at ' + i); };
  const token = (re) => {
    re.lastIndex = i;
    if (!re.test(text)) fail();
    const node = { start: i, end: re.lastIndex };
    i = re.lastIndex;
    return node;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '{' || c === '[') {
      const obj = c === '{';
      const node = obj ? { kind: 'object', members: [], start: i } : { kind: 'array', items: [], start: i };
      const close = () => { node.end = i; return node; };
      i++;
      ws();
      if (text[i] === (obj ? '}' : ']')) { i++; return close(); }
      for (;;) {
        if (obj) {
          ws();
          const k = token(jsonString);
          ws();
          if (text[i] !== ':') fail();
          i++;
          node.members.push([JSON.parse(text.slice(k.start, k.end)), value()]);
        } else {
          node.items.push(value());
        }
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === (obj ? '}' : ']')) { i++; return close(); }
        fail();
      }
    }
    if (c === '"') return { kind: 'string', ...token(jsonString) };
    return { kind: 'literal', ...token(jsonLiteral) };
  };
  const root = value();
  ws();
  if (i !== text.length) fail();
  return root;
}

// RawJSON is a JSON value with the text it was read from.
class RawJSON {
  constructor(text, node) { this.text = text; this.node = node; }

  // at is the value at path (member names and array indexes), or null.
  at(...path) {
    let n = this.node;
    for (const step of path) {
      if (n.kind === 'object') {
        const m = n.members.findLast(([k]) => k === step); // the last one, as JSON.parse keeps
        n = m && m[1];
      } else if (n.kind === 'array') {
        n = n.items[step];
      } else {
        n = null;
      }
      if (!n) return null;
    }
    return new RawJSON(this.text, n);
  }

  // pretty is the value indented by two spaces, as JSON.stringify(v, null, 2).
  pretty() { return this.formatted('\n', '  ', ': '); }

  // compact is the value on one line, as JSON.stringify(v).
  compact() { return this.formatted('', '', ':'); }

  // formatted is the value formatted, or its text as written when it nests
  // deeper than the page's stack can format (the API takes 10,000 levels).
  formatted(nl, step, colon) {
    try {
      return this.format(this.node, nl, step, colon);
    } catch {
      return this.text.slice(this.node.start, this.node.end);
    }
  }

  format(n, nl, step, colon, indent = '') {
    const inner = indent + step;
    switch (n.kind) {
      case 'string': return JSON.stringify(JSON.parse(this.text.slice(n.start, n.end)));
      case 'literal': return this.text.slice(n.start, n.end);
      case 'array': return n.items.length
        ? '[' + nl + n.items.map((v) => inner + this.format(v, nl, step, colon, inner)).join(',' + nl) + nl + indent + ']'
        : '[]';
      default: return n.members.length
        ? '{' + nl + n.members.map(([k, v]) => inner + JSON.stringify(k) + colon + this.format(v, nl, step, colon, inner)).join(',' + nl) + nl + indent + '}'
        : '{}';
    }
  }
}

// rawJSON reads JSON text for showing as written, or is null when the
// text is not JSON (or nests too deep to read).
export function rawJSON(text) {
  try {
    return new RawJSON(text, parseTree(String(text)));
  } catch {
    return null;
  }
}

// prettyPayload shows JSON indented, every number as written; anything
// else as it is (as text).
export function prettyPayload(text) {
  const j = rawJSON(text);
  return j ? j.pretty() : text;
}

// rerender replaces el's children with new ones (a refresh), keeping what
// the reader did to the old ones: an element with data-keep that matches
// one of the old by that key keeps its open state (a <details>) and its
// scroll position.
export function rerender(el, ...children) {
  const kept = new Map();
  for (const e of el.querySelectorAll('[data-keep]')) {
    kept.set(e.dataset.keep, { open: e.open, top: e.scrollTop, left: e.scrollLeft });
  }
  clear(el, ...children);
  for (const e of el.querySelectorAll('[data-keep]')) {
    const k = kept.get(e.dataset.keep);
    if (!k) continue;
    if (e instanceof HTMLDetailsElement) e.open = k.open;
    e.scrollTop = k.top;
    e.scrollLeft = k.left;
  }
  return el;
}
