// pages/compare: several experiments (#/compare?e=1,2) or runs (#/compare?r=5,9)
// overlaid: the same charts as an experiment's page with one series per source and
// setting, and one table of every source's rows with the source named in each row.
//
// Decision: runs are compared through the same figures as experiments: a run's
// collective rows are averaged over its repeats into a results-shaped table, so there is
// one way to draw each chart.
import { api, el, statusBadge, dataTable, downloadButtons, errorBox, mapLimit, fmtAge } from '../util.js';
import { collectiveCharts, trainingCharts, epochCharts, mainColumns, COLUMN_FORMAT, describeRun } from '../figures.js';

// A run's collectives as a results table: mean over repeats per (op, dtype, redop, inplace, bytes).
function runTable(run) {
  const keys = ['op', 'dtype', 'redop', 'inplace', 'bytes'];
  const groups = new Map();
  for (const c of run.collectives) {
    const k = keys.map((x) => c[x]).join('|');
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(c);
  }
  const mean = (xs, f) => xs.reduce((a, x) => a + x[f], 0) / xs.length;
  const rows = [...groups.values()].map((cs) => ({
    ...Object.fromEntries(keys.map((x) => [x, cs[0][x]])), world_size: run.world_size, algorithm: cs[0].algorithm,
    busbw_gbs_mean: mean(cs, 'busbw_gbs'), algbw_gbs_mean: mean(cs, 'algbw_gbs'), time_us_mean: mean(cs, 'time_us_median'), busbw_gbs_n: cs.length,
    wrong: cs.reduce((a, x) => a + x.wrong, 0),
  }));
  return { workload: 'collective', group_by: [], columns: [...keys, 'world_size', 'algorithm', 'busbw_gbs_mean', 'algbw_gbs_mean', 'time_us_mean', 'busbw_gbs_n', 'wrong'], rows };
}

export async function renderCompare(main, query) {
  const ids = (query.get('e') || '').split(',').map(Number).filter((x) => x > 0);
  const runIds = (query.get('r') || '').split(',').map(Number).filter((x) => x > 0);
  const picked = new Set(ids);
  const out = el('div', { id: 'compare-out' });
  main.append(el('h1', {}, 'Compare'));

  const list = await api('/v1/experiments?limit=100');
  const boxes = list.items.map((it) => el('li', {}, el('label', {},
    el('input', { type: 'checkbox', value: it.id, checked: picked.has(it.id), onchange: (ev) => { ev.target.checked ? picked.add(it.id) : picked.delete(it.id); } }),
    ` #${it.id} ${it.name} `, el('span', { class: 'muted' }, `(${it.workload}, ${fmtAge(it.created_at)}) `), statusBadge(it.status))));
  main.append(el('form', { onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/compare?e=${[...picked].join(',')}`; } },
    el('details', { open: ids.length === 0 && runIds.length === 0 }, el('summary', {}, 'Pick experiments'),
      list.items.length ? el('ul', { class: 'examples pick', id: 'pick' }, boxes) : el('p', {}, 'No experiments yet.'),
      el('button', { type: 'submit', class: 'primary' }, 'Compare selected'))),
    el('p', { class: 'muted' }, 'To compare single runs, select them on an experiment\'s page.'), out);

  if (!ids.length && !runIds.length) return () => {};
  const sources = [];
  const errors = [];
  await mapLimit(ids, 4, async (id) => {
    try {
      const [exp, table] = await Promise.all([api(`/v1/experiments/${id}`), api(`/v1/experiments/${id}/results`)]);
      sources.push({ kind: 'experiment', id, label: `#${id} ${exp.name}`, workload: table.workload, table, exp });
    } catch (e) { errors.push(errorBox(`Experiment ${id}`, e)); }
  });
  await mapLimit(runIds, 4, async (rid) => {
    try {
      const run = await api(`/v1/runs/${rid}`);
      const workload = run.spec.workload;
      sources.push({ kind: 'run', id: rid, label: describeRun(run) + ` of #${run.experiment_id}`, workload, run, table: workload === 'collective' ? runTable(run) : null });
    } catch (e) { errors.push(errorBox(`Run ${rid}`, e)); }
  });
  sources.sort((a, b) => (a.kind === b.kind ? a.id - b.id : a.kind < b.kind ? -1 : 1));
  out.append(...errors);

  const coll = sources.filter((s) => s.workload === 'collective' && s.table);
  const train = sources.filter((s) => s.workload !== 'collective');
  const charts = el('div', { class: 'charts', id: 'charts' });
  if (coll.length) charts.append(...collectiveCharts(coll));
  const trainTables = train.filter((s) => s.table);
  if (trainTables.length) charts.append(...trainingCharts(trainTables));
  const trainRuns = train.filter((s) => s.run);
  if (trainRuns.length) charts.append(...epochCharts(trainRuns.map((s) => ({ label: s.label, epochs: s.run.epochs }))));

  // one table: every source's rows, the source first
  const withTables = sources.filter((s) => s.table);
  const cols = ['source', ...new Set([...(withTables.some((s) => s.table.columns.includes('world_size')) ? ['world_size'] : []), ...withTables.flatMap((s) => mainColumns(s.table))])];
  // an experiment that did not sweep world_size has no such column: its one world size is
  // the spec's, and a side-by-side row must show it rather than a dash
  const specWorld = (s) => (s.exp && Number.isInteger(s.exp.spec.world_size) ? s.exp.spec.world_size : undefined);
  const rows = withTables.flatMap((s) => s.table.rows.map((r) => ({ source: s.label, ...r, world_size: r.world_size ?? specWorld(s) ?? (s.run && s.run.world_size) })));
  const runRows = trainRuns.map((s) => {
    const last = s.run.epochs[s.run.epochs.length - 1] || {};
    return { source: s.label, world_size: s.run.world_size, status: s.run.status, duration_s: s.run.duration_s, epochs: s.run.epochs.length, train_loss: last.train_loss, test_acc: last.test_acc };
  });
  out.append(el('h2', {}, `Overlaid: ${sources.map((s) => s.label).join(' · ')}`), charts);
  if (rows.length) {
    out.append(el('h2', {}, 'Results side by side'),
      downloadButtons(() => ({ name: 'compare', columns: cols, rows, json: withTables.map((s) => ({ source: s.label, table: s.table })) })),
      dataTable(cols, rows, { caption: 'Every source\'s result rows', format: COLUMN_FORMAT }));
  }
  if (runRows.length) {
    const rc = ['source', 'world_size', 'status', 'duration_s', 'epochs', 'train_loss', 'test_acc'];
    out.append(el('h2', {}, 'Training runs'), downloadButtons(() => ({ name: 'compare-runs', columns: rc, rows: runRows })), dataTable(rc, runRows, { caption: 'Runs: final epoch' }));
  }
  return () => {};
}
