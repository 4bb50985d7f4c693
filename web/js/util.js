// util: DOM building, the API client, number/time formatting, tables and downloads.
//
// Decision: no framework and no build step. Views are rebuilt from data with el(),
// a tiny hyperscript helper; text always goes through textContent (never innerHTML),
// so names and error messages from the API cannot inject markup.

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// --- API ---------------------------------------------------------------------------------

// An error reply of the daemon ({"error": {"code", "message", "field"}}) or a network
// failure (status 0).
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
}

export function token() {
  return sessionStorage.getItem('ddpb-token') || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem('ddpb-token', t);
  else sessionStorage.removeItem('ddpb-token');
}

// fetch + JSON; throws ApiError with the daemon's message. body: a string sent as is.
export async function api(path, opts = {}) {
  const headers = {};
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (token()) headers.Authorization = 'Bearer ' + token();
  let r;
  try {
    r = await fetch(path, { method: opts.method || 'GET', body: opts.body, headers, signal: opts.signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'unreachable', 'ddpbenchd is not answering (' + e.message + ')');
  }
  const text = await r.text();
  let data = null;
  if ((r.headers.get('Content-Type') || '').startsWith('application/json')) {
    try { data = JSON.parse(text); } catch (_) { data = null; }
  }
  if (!r.ok) {
    const err = data && data.error;
    throw new ApiError(r.status, err ? err.code : 'http', err ? err.message : `HTTP ${r.status}: ${text.slice(0, 200)}`, err && err.field);
  }
  return data !== null ? data : text;
}

// Runs f over items with at most `limit` in flight (the daemon has a few HTTP threads).
export async function mapLimit(items, limit, f) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i], i);
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

// --- formatting --------------------------------------------------------------------------

export function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || v === '') return '—';
  if (typeof v !== 'number') return String(v);
  if (!isFinite(v)) return '—';
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return v.toLocaleString('en-US');
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e7)) return v.toExponential(digits - 1);
  return Number(v.toPrecision(digits)).toLocaleString('en-US', { maximumFractionDigits: 6 });
}

export function fmtBytes(b) {
  if (b === null || b === undefined) return '—';
  const units = ['B', 'K', 'M', 'G', 'T'];
  let i = 0, v = b;
  while (v >= 1024 && i < units.length - 1 && v % 1024 === 0) { v /= 1024; i++; }
  if (v < 1024 || i === units.length - 1) return v + units[i];
  // not a whole number of the unit: three significant digits of the largest unit below
  // 1024 (1751360 is 1.67M, never "1.71e+3K")
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return Number(v.toPrecision(3)) + units[i];
}

export function fmtAge(iso, now = Date.now()) {
  if (!iso) return '—';
  const s = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + ' s ago';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 86400) return Math.floor(s / 3600) + ' h ago';
  return Math.floor(s / 86400) + ' d ago';
}

export function fmtDuration(s) {
  if (s === null || s === undefined) return '—';
  if (s < 1) return (s * 1000).toPrecision(3) + ' ms';
  if (s < 120) return s.toPrecision(3) + ' s';
  return (s / 60).toFixed(1) + ' min';
}

export const TERMINAL = ['succeeded', 'failed', 'cancelled', 'interrupted'];

export function statusBadge(status) {
  return el('span', { class: 'badge st-' + status }, status);
}

// A spec field as shown in a list: the swept values when swept, else the value.
export function specField(spec, key) {
  if (!spec) return '—';
  const sw = spec.sweep && spec.sweep[key];
  if (Array.isArray(sw)) return sw.join(', ');
  // a zipped field (sweep.zip: points of fields that vary together): its value per point
  const zip = spec.sweep && spec.sweep.zip;
  if (Array.isArray(zip) && zip.length && key in zip[0]) return zip.map((p) => p[key]).join(', ');
  const v = spec[key];
  return v === undefined || v === null || v === '' ? '—' : String(v);
}

// --- tables ------------------------------------------------------------------------------

// A table of rows (objects) over columns; each cell carries its raw value in
// data-value (JSON) and its column in data-col, so tests and copy-paste get exact figures.
export function dataTable(columns, rows, opts = {}) {
  const fmt = opts.format || {};
  const thead = el('thead', {}, el('tr', {}, columns.map((c) => el('th', { scope: 'col' }, opts.labels && opts.labels[c] || c))));
  const tbody = el('tbody', {}, rows.map((r) => el('tr', {}, columns.map((c) => {
    const v = r[c];
    const text = fmt[c] ? fmt[c](v, r) : fmtNum(v);
    return el('td', { 'data-col': c, 'data-value': JSON.stringify(v === undefined ? null : v), class: typeof v === 'number' ? 'num' : null }, text);
  }))));
  return el('div', { class: 'table-wrap', tabindex: 0, role: 'region', 'aria-label': opts.caption || 'table' },
    el('table', { class: 'data ' + (opts.className || '') }, opts.caption ? el('caption', {}, opts.caption) : null, thead, tbody));
}

export function toCSV(columns, rows) {
  const cell = (v) => {
    if (v === null || v === undefined) return '';
    const s = typeof v === 'object' ? JSON.stringify(v) : String(v);
    return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  };
  return [columns.map(cell).join(','), ...rows.map((r) => columns.map((c) => cell(r[c])).join(','))].join('\r\n') + '\r\n';
}

export function download(filename, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = el('a', { href: url, download: filename });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// "Download CSV" and "Download JSON" buttons for what get() returns: {name, columns, rows, json?}.
export function downloadButtons(get, csvHref) {
  const csv = csvHref
    ? el('a', { class: 'button', href: csvHref(), download: '', onclick: (ev) => { ev.currentTarget.href = csvHref(); } }, 'Download CSV')
    : el('button', { type: 'button', onclick: () => { const d = get(); download(d.name + '.csv', toCSV(d.columns, d.rows), 'text/csv'); } }, 'Download CSV');
  const json = el('button', { type: 'button', onclick: () => { const d = get(); download(d.name + '.json', JSON.stringify(d.json || d.rows, null, 2) + '\n', 'application/json'); } }, 'Download JSON');
  return el('div', { class: 'downloads' }, csv, json);
}

export function announce(text) {
  const live = document.getElementById('live');
  if (live) live.textContent = text;
}

export function errorBox(what, err) {
  return el('div', { class: 'error', role: 'alert' }, el('strong', {}, what + ': '), err.message || String(err));
}
