// pages/list: the experiments table with filters, paging and live updates.
//
// Decision: the list endpoint returns summaries whose "summary" holds the distinct models
// (or ops), backends, strategies and world sizes of each experiment's runs, so the table
// needs no request per experiment; only a daemon without it (older than schema 004) makes
// the table fall back to each listed experiment's GET, fetched once per experiment (a
// spec never changes) with at most 4 requests in flight. Live status comes
// from /v1/events; an event about an experiment not on the page (a new one) reloads
// the page of results, debounced.
import { api, el, fmtAge, fmtDuration, specField, statusBadge, mapLimit, downloadButtons, errorBox, announce } from '../util.js';

const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted'];
const PAGE = 25;
const details = new Map(); // experiment id -> {spec, worldSizes}

export async function renderList(main, query) {
  const state = { status: query.get('status') || '', name: query.get('name') || '', workload: query.get('workload') || '', offset: Number(query.get('offset')) || 0 };
  let items = [], total = 0, reloadTimer = null;
  const rowsById = new Map();

  const statusSel = el('select', { id: 'f-status', name: 'status' }, el('option', { value: '' }, 'any'), STATUSES.map((s) => el('option', { value: s }, s)));
  const nameIn = el('input', { id: 'f-name', name: 'name', type: 'search', placeholder: 'part of the name' });
  const wlSel = el('select', { id: 'f-workload', name: 'workload' }, el('option', { value: '' }, 'any'), el('option', { value: 'collective' }, 'collective'), el('option', { value: 'train' }, 'train'));
  statusSel.value = state.status; nameIn.value = state.name; wlSel.value = state.workload;
  const count = el('p', { class: 'muted', id: 'list-count' });
  const tableBox = el('div', { id: 'experiments' });
  const prev = el('button', { type: 'button', onclick: () => { state.offset = Math.max(0, state.offset - PAGE); load(); } }, '← Newer');
  const next = el('button', { type: 'button', onclick: () => { state.offset += PAGE; load(); } }, 'Older →');
  const columns = ['id', 'name', 'status', 'runs_finished', 'n_runs', 'workload', 'model', 'backend', 'strategy', 'world_sizes', 'created_at', 'duration_s'];
  const shown = () => ({ name: 'experiments', columns, rows: items.map(flat), json: items.map((it) => ({ ...it, ...flat(it) })) });

  main.append(
    el('h1', {}, 'Experiments'),
    el('form', { class: 'toolbar', role: 'search', onsubmit: (ev) => { ev.preventDefault(); } },
      el('div', { class: 'field' }, el('label', { for: 'f-status' }, 'Status'), statusSel),
      el('div', { class: 'field' }, el('label', { for: 'f-name' }, 'Name'), nameIn),
      el('div', { class: 'field' }, el('label', { for: 'f-workload' }, 'Workload'), wlSel),
      el('a', { class: 'button', href: '#/submit' }, 'New experiment'),
      downloadButtons(shown)),
    count, tableBox, el('div', { class: 'pager' }, prev, next));

  let nameTimer = null;
  statusSel.addEventListener('change', () => { state.status = statusSel.value; state.offset = 0; load(); });
  wlSel.addEventListener('change', () => { state.workload = wlSel.value; state.offset = 0; load(); });
  nameIn.addEventListener('input', () => { clearTimeout(nameTimer); nameTimer = setTimeout(() => { state.name = nameIn.value.trim(); state.offset = 0; load(); }, 250); });

  function flat(it) {
    const s = it.summary;
    if (s) {
      const list = (v) => (v || []).join(', ');
      return {
        id: it.id, name: it.name, status: it.status, runs_finished: it.runs_finished, n_runs: it.n_runs, workload: it.workload,
        model: list(s.models) || list(s.ops), backend: list(s.backends), strategy: list(s.strategies) || '—',
        world_sizes: list(s.world_sizes), created_at: it.created_at, duration_s: it.duration_s,
      };
    }
    const d = details.get(it.id) || {};
    return {
      id: it.id, name: it.name, status: it.status, runs_finished: it.runs_finished, n_runs: it.n_runs, workload: it.workload,
      model: d.spec ? (d.spec.model !== undefined ? specField(d.spec, 'model') : specField(d.spec, 'op')) : '',
      backend: d.spec ? specField(d.spec, 'backend') : '', strategy: d.spec ? specField(d.spec, 'strategy') : '',
      world_sizes: d.worldSizes ? d.worldSizes.join(', ') : '', created_at: it.created_at, duration_s: it.duration_s,
    };
  }

  function row(it) {
    const f = flat(it);
    const tr = el('tr', { 'data-id': it.id },
      el('td', { class: 'num' }, it.id),
      el('td', {}, el('a', { href: `#/experiments/${it.id}` }, it.name)),
      el('td', { 'data-col': 'status' }, statusBadge(it.status)),
      el('td', { 'data-col': 'progress' }, el('progress', { max: it.n_runs, value: it.runs_finished, 'aria-label': `runs finished of ${it.name}` }),
        el('span', { class: 'progress-text' }, `${it.runs_finished} / ${it.n_runs} runs`)),
      el('td', {}, it.workload),
      el('td', { 'data-col': 'model' }, f.model || '…'),
      el('td', { 'data-col': 'backend' }, f.backend || '…'),
      el('td', { 'data-col': 'strategy' }, f.strategy || '…'),
      el('td', { 'data-col': 'world_sizes', class: 'num' }, f.world_sizes || '…'),
      el('td', { 'data-col': 'age', title: it.created_at }, fmtAge(it.created_at)),
      el('td', { class: 'num' }, fmtDuration(it.duration_s)));
    rowsById.set(it.id, tr);
    return tr;
  }

  function draw() {
    rowsById.clear();
    count.textContent = total ? `${total} experiment${total === 1 ? '' : 's'}; showing ${state.offset + 1}–${state.offset + items.length}` : 'No experiments match.';
    prev.disabled = state.offset === 0;
    next.disabled = state.offset + items.length >= total;
    if (!items.length) { tableBox.replaceChildren(total === 0 && !state.status && !state.name && !state.workload ? el('p', {}, 'Nothing submitted yet. ', el('a', { href: '#/submit' }, 'Submit an experiment'), '.') : ''); return; }
    tableBox.replaceChildren(el('div', { class: 'table-wrap' }, el('table', { class: 'data', id: 'experiments-table' },
      el('caption', {}, 'Experiments, newest first (live)'),
      el('thead', {}, el('tr', {}, ['ID', 'Name', 'Status', 'Progress', 'Workload', 'Model / op', 'Backend', 'Strategy', 'World sizes', 'Age', 'Duration'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, items.map(row)))));
  }

  async function fill() {
    const missing = items.filter((it) => !it.summary && !details.has(it.id));
    await mapLimit(missing, 4, async (it) => {
      try {
        const x = await api(`/v1/experiments/${it.id}`);
        details.set(it.id, { spec: x.spec, worldSizes: [...new Set(x.runs.map((r) => r.world_size))].sort((a, b) => a - b) });
      } catch (_) { details.set(it.id, {}); }
    });
    if (missing.length) draw();
  }

  async function load() {
    const q = new URLSearchParams({ limit: PAGE, offset: state.offset });
    for (const k of ['status', 'name', 'workload']) if (state[k]) q.set(k, state[k]);
    const hq = new URLSearchParams();
    for (const k of ['status', 'name', 'workload']) if (state[k]) hq.set(k, state[k]);
    if (state.offset) hq.set('offset', state.offset);
    history.replaceState(null, '', '#/experiments' + (hq.toString() ? '?' + hq : ''));
    try {
      const page = await api('/v1/experiments?' + q);
      items = page.items; total = page.total;
      draw();
      await fill();
    } catch (e) {
      tableBox.replaceChildren(errorBox('Cannot list experiments', e));
    }
  }

  function reloadSoon() {
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(load, 300);
  }

  const es = new EventSource('/v1/events');
  es.addEventListener('experiment', (ev) => {
    const d = JSON.parse(ev.data);
    const it = items.find((x) => x.id === d.id);
    if (!it) { reloadSoon(); return; }
    Object.assign(it, { status: d.status, runs_finished: d.runs_finished });
    if (state.status && d.status !== state.status) { reloadSoon(); return; }
    const tr = rowsById.get(d.id);
    if (tr) tr.replaceWith(row(it));
    announce(`Experiment ${it.name} is ${d.status}, ${d.runs_finished} of ${it.n_runs} runs finished`);
  });
  es.addEventListener('run', (ev) => {
    const d = JSON.parse(ev.data);
    const it = items.find((x) => x.id === d.experiment);
    if (!it) { if (!state.offset) reloadSoon(); return; }
    if (it.status === 'queued' && (d.status === 'starting' || d.status === 'running')) {
      it.status = 'running';
      const tr = rowsById.get(it.id);
      if (tr) tr.replaceWith(row(it));
    }
  });
  es.addEventListener('lagged', reloadSoon);
  const ages = setInterval(() => {
    for (const it of items) {
      const td = rowsById.get(it.id) && rowsById.get(it.id).querySelector('[data-col=age]');
      if (td) td.textContent = fmtAge(it.created_at);
    }
  }, 15000);

  await load();
  return () => { es.close(); clearInterval(ages); clearTimeout(reloadTimer); clearTimeout(nameTimer); };
}
