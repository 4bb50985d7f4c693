// figures: the charts researchers draw by hand, built from the API's shapes: results
// tables (GET /v1/experiments/{id}/results), runs' epochs (GET /v1/runs/{id}) and
// per-rank steps (GET /v1/runs/{id}/steps).
//
// Decision: every function takes a list of labelled sources, so the experiment page
// (one source) and the compare page (several, overlaid) draw the same charts the same
// way. A series is one combination of the identifying columns that vary; the label
// names only what varies, so a legend stays short. Column labels and units, and the step
// phases, come from the results reply's column_info and phases (common/columns.h): the
// dashboard keeps no copy of them.
import { el, svg, fmtNum, fmtBytes, dataTable } from './util.js';
import { lineChart, stackedBars, legend, PALETTE } from './charts.js';

const COLLECTIVE_ID = ['op', 'dtype', 'redop', 'inplace'];

// The phases that add up to a step, [key, label] in order, from a results reply.
export function stackedPhases(table) {
  return (table.phases || []).filter((p) => p.stacked).map((p) => [p.key, p.label]);
}

// A column's label from the reply's column_info ("world size"), or a spec field's name
// read as words ("batch size").
function columnLabel(table, key) {
  const c = (table.column_info || []).find((i) => i.key === key);
  return c ? c.label : key.replace(/[._]/g, ' ');
}

function valueText(v) {
  if (v === true) return 'yes';
  if (v === false) return 'no';
  if (v === null || v === undefined) return '—';
  return typeof v === 'number' ? fmtNum(v) : String(v);
}

// Each row's label: "label value" of only the identifying columns whose values differ
// between the rows (in every source), so bars and legends name what sets a row apart.
function rowLabels(sources, cols) {
  const all = sources.flatMap((s) => s.table.rows);
  const differ = cols.filter((c) => new Set(all.map((r) => JSON.stringify(r[c]))).size > 1);
  return (src, row) => differ.filter((c) => row[c] !== undefined)
    .map((c) => `${columnLabel(src.table, c)} ${valueText(row[c])}`).join(', ');
}

// Columns that name a series (apart from the x column), and how rows are labelled.
// network_profile is a column of every table: series over different networks never merge.
function idColumns(table, extra) {
  return [...new Set([...(table.group_by || []), ...extra, ...(table.columns.includes('network_profile') ? ['network_profile'] : [])])];
}

// The part of a results row's mean step its engine did not split into phases: null when
// every phase was observed.
function unobservedMs(r, phases) {
  const vals = phases.map(([k]) => r[k]);
  if (vals.every((v) => Number.isFinite(v)) || !Number.isFinite(r.step_ms_mean)) return null;
  return Math.max(0, r.step_ms_mean - vals.reduce((a, v) => a + (Number.isFinite(v) ? v : 0), 0));
}

// Groups rows of every source by (source, identifying columns without x); labels name
// the source only when there are several, and only the columns whose values vary.
function groupSeries(sources, xcol, extra) {
  const out = [];
  const cols = new Set();
  for (const src of sources) idColumns(src.table, extra).forEach((c) => c !== xcol && cols.add(c));
  const varying = [...cols].filter((c) => {
    const vals = new Set(sources.flatMap((s) => s.table.rows.map((r) => JSON.stringify(r[c]))));
    return vals.size > 1;
  });
  const label = rowLabels(sources, varying);
  for (const src of sources) {
    const groups = new Map();
    for (const row of src.table.rows) {
      const k = label(src, row);
      if (!groups.has(k)) groups.set(k, []);
      groups.get(k).push(row);
    }
    for (const [k, rows] of groups) {
      const name = [sources.length > 1 ? src.label : null, k || null].filter(Boolean).join(' · ') || src.label;
      out.push({ name, rows });
    }
  }
  return out;
}

const ci = (row, name) => {
  const m = row[name + '_mean'], h = row[name + '_ci95'];
  return Number.isFinite(h) && Number.isFinite(m) ? { lo: m - h, hi: m + h } : {};
};

export function collectiveCharts(sources) {
  const groups = groupSeries(sources, 'bytes', ['world_size', ...COLLECTIVE_ID]);
  const bus = groups.map((g) => ({ name: g.name, points: g.rows.map((r) => ({ x: r.bytes, y: r.busbw_gbs_mean, ...ci(r, 'busbw_gbs') })) }));
  const time = groups.map((g) => ({ name: g.name, points: g.rows.map((r) => ({ x: r.bytes, y: r.time_us_mean, ...ci(r, 'time_us') })) }));
  return [
    lineChart({ title: 'Bus bandwidth against message size', desc: 'Mean over repeats, bars: 95% confidence interval. busbw follows nccl-tests.', x: { label: 'message size', log: 2, format: fmtBytes }, y: { label: 'busbw (GB/s)' }, series: bus }),
    lineChart({ title: 'Time per operation against message size', desc: 'Each iteration timed on the slowest rank; median per repeat, mean over repeats.', x: { label: 'message size', log: 2, format: fmtBytes }, y: { label: 'time (µs)', log: 10 }, series: time }),
  ];
}

export function trainingCharts(sources) {
  const groups = groupSeries(sources, 'world_size', ['world_size']);
  const thr = [], eff = [];
  groups.forEach((g) => {
    const pts = g.rows.filter((r) => r.world_size > 0).map((r) => ({ x: r.world_size, y: r.throughput_mean, ...ci(r, 'throughput') }));
    thr.push({ name: g.name, points: pts });
    const base = pts.filter((p) => Number.isFinite(p.y)).sort((a, b) => a.x - b.x)[0];
    if (base && pts.length > 1) thr.push({ name: `ideal (linear from ${base.x})` + (groups.length > 1 ? ` · ${g.name}` : ''), ref: true, points: pts.map((p) => ({ x: p.x, y: base.y * p.x / base.x })) });
    eff.push({ name: g.name, points: g.rows.filter((r) => r.world_size > 0).map((r) => ({ x: r.world_size, y: r.efficiency })) });
    // the performance model's prediction of the same rows (docs/model.md): dashed
    const model = g.rows.filter((r) => r.world_size > 0 && Number.isFinite(r.pred_throughput));
    if (model.length) {
      thr.push({ name: `${g.name} · model`, dash: '2 3', model: true, points: model.map((r) => ({ x: r.world_size, y: r.pred_throughput })) });
      eff.push({ name: `${g.name} · model`, dash: '2 3', model: true, points: model.map((r) => ({ x: r.world_size, y: r.pred_efficiency })) });
    }
  });
  const ws = [...new Set(groups.flatMap((g) => g.rows.map((r) => r.world_size)).filter((w) => w > 0))];
  if (ws.length) eff.push({ name: 'ideal (1.0)', ref: true, points: [Math.min(...ws), Math.max(...ws)].map((x) => ({ x, y: 1 })) });
  const ids = [...new Set(sources.flatMap((s) => idColumns(s.table, ['world_size'])))];
  const label = rowLabels(sources, ids);
  const rows = sources.flatMap((s) => s.table.rows.map((r) => ({ r, label: [sources.length > 1 ? s.label : null, label(s, r)].filter(Boolean).join(' · ') })));
  const phases = stackedPhases(sources[0].table);
  const memory = memoryColumns(sources[0].table);
  return [
    lineChart({ title: 'Throughput against world size', desc: 'Global samples per second (mean over repeats ± 95% CI); dashed: linear scaling from the smallest world size.', x: { label: 'world size (ranks)', zero: false, integer: true }, y: { label: 'throughput (samples/s)' }, series: thr }),
    lineChart({ title: 'Scaling efficiency against world size', desc: 'speed-up(N) / N against the world_size 1 group with the same other settings; dashed: ideal.', x: { label: 'world size (ranks)', zero: false, integer: true }, y: { label: 'efficiency', max: 1 }, series: eff, empty: 'No efficiency yet: it needs a world_size 1 group to compare with.' }),
    stackedBars({ title: 'Step time breakdown', desc: 'Mean per step on the slowest rank; exposed comm is communication not hidden behind backward.', unit: 'ms per step',
      categories: rows.map((x) => x.label || 'all runs'),
      segments: [...phases.map(([k, name]) => ({ name, values: rows.map((x) => x.r[k]) })),
        // a framework engine that cannot observe some phases (null, GET /v1/engines says
        // why) leaves the rest of its step as one segment, not as time that vanished
        { name: 'not observed by the engine', values: rows.map((x) => unobservedMs(x.r, phases)) }] }),
    modelBars(rows, phases),
    memoryBars(rows, memory),
    dataPipeline(rows),
  ];
}

// Throughput beside the data wait, per configuration (issue 20): the two side by side say
// when training became input-bound: a row whose data wait is a large share of its step
// (results' input_bound, marked ⚠) gains nothing from a faster model or more ranks. A
// loader_only row's throughput is what the data pipeline supplies on its own.
// <div id=data-pipeline> holds both charts; data-input-bound counts the rows marked.
function dataPipeline(rows) {
  const has = rows.filter((x) => Number.isFinite(x.r.data_fraction));
  const cats = has.map((x) => (x.r.input_bound ? '⚠ ' : '') + (x.label || 'all runs'));
  const rest = (r) => (Number.isFinite(r.step_ms_mean) && Number.isFinite(r.data_ms) ? Math.max(0, r.step_ms_mean - r.data_ms) : null);
  return el('div', { class: 'side-by-side', id: 'data-pipeline', 'data-rows': String(has.length), 'data-input-bound': String(has.filter((x) => x.r.input_bound).length) },
    stackedBars({ title: 'Throughput', desc: 'Global samples per second, mean over repeats; a loader_only row is the data pipeline alone.', unit: 'samples/s',
      categories: cats, segments: [{ name: 'throughput', values: has.map((x) => x.r.throughput_mean) }], empty: 'No throughput yet.' }),
    stackedBars({ title: 'Data wait per step', desc: 'The mean time a rank waited for its batch, and the rest of the step; ⚠ marks input-bound rows (data wait ≥ 5% of the step).', unit: 'ms per step',
      categories: cats, segments: [{ name: 'data wait', values: has.map((x) => x.r.data_ms) }, { name: 'rest of the step', values: has.map((x) => rest(x.r)) }],
      empty: 'No data wait reported (a framework engine does not observe it).' }));
}

// Each row's step as the model predicts it beside what was measured, phase by phase:
// where the two part says where the model misses (docs/model.md).
function modelBars(rows, phases) {
  const has = rows.filter((x) => Number.isFinite(x.r.pred_step_ms));
  const cats = has.flatMap((x) => [`${x.label || 'all runs'} · measured`, `${x.label || 'all runs'} · model`]);
  return stackedBars({ title: 'Step phases: measured and predicted', desc: 'Each configuration measured (first bar) and as the performance model predicts it from its one-rank run and the network fits (second bar); the table\'s pred_note says why a row has no prediction.', unit: 'ms per step',
    categories: cats,
    segments: phases.map(([k, name]) => ({ name, values: has.flatMap((x) => [x.r[k], x.r['pred_' + k]]) })),
    empty: 'No prediction: it needs a world_size 1 run of the ddpbench engine and a collective experiment on the same backend.' });
}

// POST /v1/predict's curves as speed-up against world size (log scale), the measured
// speed-ups of the results table as points on the same axes, and the ideal line.
export function whatIfChart(pred, table) {
  const series = pred.predictions.map((c) => ({ name: `${c.strategy} · model (run ${c.base_run})`, dash: '2 3', model: true,
    points: c.points.map((p) => ({ x: p.world_size, y: p.speedup })) }));
  if (table) {
    const groups = groupSeries([{ label: '', table }], 'world_size', ['world_size']);
    groups.forEach((g) => series.push({ name: `${g.name || 'measured'} · measured`, points: g.rows.filter((r) => r.world_size > 0 && Number.isFinite(r.speedup)).map((r) => ({ x: r.world_size, y: r.speedup, ...(Number.isFinite(r.speedup_ci95) ? { lo: r.speedup - r.speedup_ci95, hi: r.speedup + r.speedup_ci95 } : {}) })) }));
  }
  const ws = pred.predictions.flatMap((c) => c.points.map((p) => p.world_size));
  if (ws.length) series.push({ name: 'ideal (speed-up = N)', ref: true, points: [...new Set(ws)].sort((a, b) => a - b).map((x) => ({ x, y: x })) });
  return lineChart({ title: 'What if: predicted speed-up against world size', desc: 'Dashed: the model from each one-rank run (docs/model.md); points: measured speed-up ± 95% CI; thin dashed: ideal.', x: { label: 'world size (ranks)', log: 2, integer: true }, y: { label: 'speed-up', log: 2 }, series, empty: 'No prediction.' });
}

// What the largest rank holds, per group, in MiB: the ZeRO comparison at a glance (its
// optimizer state, and under zero2 its gradients, shrink with the world size).
const MEMORY = ['params_bytes', 'grads_bytes', 'optimizer_bytes', 'comm_bytes', 'activations_bytes'];
const MIB = 1024 * 1024;

// [mean key, label] of MEMORY's columns, labelled by the reply's column_info.
function memoryColumns(table) {
  return MEMORY.map((k) => [`${k}_mean`, columnLabel(table, k)]);
}

function memoryBars(rows, memory) {
  const has = rows.filter((x) => memory.some(([k]) => Number.isFinite(x.r[k])));
  return stackedBars({ title: 'Memory per rank', desc: 'What the largest rank holds (mean over repeats); segments a framework engine cannot tell are left out (GET /v1/engines says which). Peak RSS is in the results table.', unit: 'MiB per rank',
    categories: has.map((x) => x.label || 'all runs'),
    segments: memory.map(([k, name]) => ({ name, values: has.map((x) => (Number.isFinite(x.r[k]) ? x.r[k] / MIB : null)) })),
    empty: 'No memory reported yet: ranks report it at the end of each repeat.' });
}

// runs: [{label, epochs: [{repeat, epoch, train_loss, train_acc, test_loss, test_acc}]}]
// One series per run (mean over repeats at each epoch).
export function epochCharts(runs) {
  const mean = (eps, key) => {
    const by = new Map();
    for (const e of eps) if (e[key] !== null && e[key] !== undefined) {
      if (!by.has(e.epoch)) by.set(e.epoch, []);
      by.get(e.epoch).push(e[key]);
    }
    // stored epochs count from 0; a person counts the first pass over the data as epoch 1
    return [...by].map(([x, v]) => ({ x: x + 1, y: v.reduce((a, b) => a + b, 0) / v.length }));
  };
  const loss = [], acc = [];
  for (const r of runs) {
    loss.push({ name: r.label + ' train', points: mean(r.epochs, 'train_loss') });
    const test = mean(r.epochs, 'test_loss');
    if (test.length) loss.push({ name: r.label + ' test', points: test, dash: '6 3' });
    acc.push({ name: r.label + ' train', points: mean(r.epochs, 'train_acc') });
    const ta = mean(r.epochs, 'test_acc');
    if (ta.length) acc.push({ name: r.label + ' test', points: ta, dash: '6 3' });
  }
  return [
    lineChart({ title: 'Loss per epoch', x: { label: 'epoch', zero: false, integer: true }, y: { label: 'loss' }, series: loss, empty: 'No epochs reported yet.' }),
    lineChart({ title: 'Accuracy per epoch', x: { label: 'epoch', zero: false, integer: true }, y: { label: 'accuracy', max: 1 }, series: acc, empty: 'No epochs reported yet.' }),
  ];
}

// The class names of the datasets that have them (daemon/report_html.c's table for the
// HTML report holds the same); another dataset's classes are numbered.
const CLASS_NAMES = {
  'fashion-mnist': ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot'],
  cifar10: ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck'],
};

// runs: [{label, dataset, epochs: [{..., test_acc_per_class}]}]: the last epoch's test
// accuracy per class of each run (issue 33), a row per run, a column per class; nothing
// when no run reported it (or a classifier has more classes than a table shows).
export function perClassTable(runs) {
  const last = (eps) => (eps && eps.length ? eps[eps.length - 1].test_acc_per_class : null);
  const have = runs.filter((r) => Array.isArray(last(r.epochs)));
  if (!have.length) return [];
  const k = last(have[0].epochs).length;
  if (k > 20) return [];
  const names = CLASS_NAMES[have[0].dataset] && CLASS_NAMES[have[0].dataset].length === k
    ? CLASS_NAMES[have[0].dataset] : [...Array(k).keys()].map(String);
  const rows = have.filter((r) => last(r.epochs).length === k).map((r) => Object.fromEntries(
    [['run', r.label], ...last(r.epochs).map((v, c) => [names[c], v])]));
  const pct = (v) => (v === null || v === undefined ? '—' : `${(100 * v).toFixed(1)}%`);
  const format = Object.fromEntries(names.map((n) => [n, pct]));
  format.run = (v) => v;
  const table = dataTable(['run', ...names], rows, { caption: 'Test accuracy per class (last epoch; — where the test split has no sample of the class)', className: 'per-class', format });
  table.id = 'per-class';
  return [table];
}

function quantile(sorted, q) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

// An elastic run's generations along the step chart (issue 32): a mark at each
// generation's first step and one at the fault (the first lost slot's end, matched to the
// first step stored after it by the steps' at column), at the x the step chart counts
// (steps in (repeat, step) order), and the world size at each step. No marks for a run
// that formed no generation after the launch's.
export function elasticMarks(steps, generations) {
  const ci = Object.fromEntries(steps.columns.map((c, i) => [c, i]));
  if (ci.generation === undefined || !generations || generations.length < 2) return { marks: [], world: [] };
  const order = new Map(), first = new Map(), world = [], ats = [];
  for (const row of steps.rows) {
    const key = row[ci.repeat] + ':' + row[ci.step];
    if (!order.has(key)) {
      const x = order.size;
      order.set(key, x);
      world.push({ x, y: row[ci.world] });
      ats.push({ x, at: row[ci.at] });
    }
    const g = row[ci.generation];
    if (g !== null && !first.has(g)) first.set(g, order.get(key));
  }
  const marks = generations.filter((g) => g.gen > 0 && first.has(g.gen))
    .map((g) => ({ x: first.get(g.gen), label: `gen ${g.gen}: ${g.world} rank${g.world === 1 ? '' : 's'}` }));
  const lost = generations.find((g) => g.lost_at);
  if (lost && ats.length) {
    const t = Date.parse(lost.lost_at) / 1000;
    const after = ats.find((p) => p.at !== null && p.at >= t);
    marks.push({ x: (after || ats[ats.length - 1]).x, label: 'fault: ' + lost.reason, fault: true });
  }
  return { marks, world };
}

// steps: the compact table of GET /v1/runs/{id}/steps. Returns {chart, worldChart, columns,
// rows}: each rank's step times over the run (an elastic run's generation changes and its
// fault marked, from its generations, GET /v1/runs/{id}), its world size over the steps
// (elastic runs only, else null), and per rank the median, p95, max and how often it was
// the slowest rank of a step (a straggler is slowest far more than 1/N of steps).
export function stragglers(steps, generations) {
  const ci = Object.fromEntries(steps.columns.map((c, i) => [c, i]));
  const byRank = new Map(), slowest = new Map(), perStep = new Map();
  let idx = 0;
  const order = new Map();
  for (const row of steps.rows) {
    const rank = row[ci.rank], key = row[ci.repeat] + ':' + row[ci.step];
    if (!order.has(key)) order.set(key, idx++);
    if (!byRank.has(rank)) byRank.set(rank, []);
    byRank.get(rank).push({ x: order.get(key), y: row[ci.step_ms] });
    const cur = perStep.get(key);
    if (!cur || row[ci.step_ms] > cur.ms) perStep.set(key, { rank, ms: row[ci.step_ms] });
  }
  for (const { rank } of perStep.values()) slowest.set(rank, (slowest.get(rank) || 0) + 1);
  const ranks = [...byRank.keys()].sort((a, b) => a - b);
  const rows = ranks.map((rank) => {
    const v = byRank.get(rank).map((p) => p.y).sort((a, b) => a - b);
    return { rank, steps: v.length, median_ms: quantile(v, 0.5), p95_ms: quantile(v, 0.95), max_ms: v[v.length - 1],
      slowest_share: perStep.size ? (slowest.get(rank) || 0) / perStep.size : null };
  });
  const em = elasticMarks(steps, generations);
  const chart = lineChart({ title: 'Step time per rank', desc: 'Each rank\'s own step time (timed steps, all repeats in order); a straggler sits above the others.' +
      (em.marks.length ? ' Dashed lines: a new generation of the elastic run; the solid red line: the fault.' : ''),
    x: { label: 'step', zero: false, integer: true }, y: { label: 'step time (ms)' }, marks: em.marks,
    series: ranks.map((r) => ({ name: 'rank ' + r, points: byRank.get(r) })), empty: 'No steps stored for this run.' });
  const worldChart = em.marks.length ? lineChart({ title: 'World size', desc: 'The ranks of the generation each step ran in: a lost rank shrinks it, a replacement grows it back.',
    x: { label: 'step', zero: false, integer: true }, y: { label: 'ranks', integer: true }, marks: em.marks,
    series: [{ name: 'world size', points: em.world }], empty: 'No steps stored for this run.' }) : null;
  return { chart, worldChart, columns: ['rank', 'steps', 'median_ms', 'p95_ms', 'max_ms', 'slowest_share'], rows };
}

// The columns of a results table worth showing by default (the rest behind a toggle).
export function mainColumns(table) {
  const keep = table.workload === 'collective'
    ? ['bytes', 'algorithm', 'busbw_gbs_mean', 'busbw_gbs_ci95', 'algbw_gbs_mean', 'time_us_mean', 'time_us_median', 'time_us_p95', 'busbw_gbs_n', 'wrong']
    : ['world_size', 'single_process', 'runs', 'throughput_mean', 'throughput_ci95', 'speedup', 'efficiency', 'step_ms_median', 'step_ms_p95',
      ...stackedPhases(table).map((p) => p[0]), 'overlap', 'straggler_ms', 'test_acc_mean', 'train_loss_mean',
      ...RESOURCE_COLUMNS];
  const lead = table.group_by || [];
  // memory, utilisation, time to accuracy and a pipeline's bubble only where some row
  // measured them
  const some = (c) => c === 'single_process' ? table.rows.some((r) => r[c] === true)
    : !RESOURCE_COLUMNS.includes(c) || table.rows.some((r) => r[c] !== null && r[c] !== undefined);
  return [...new Set([...lead, ...keep])].filter((c) => table.columns.includes(c) && some(c));
}

// A pipeline's columns (spec pipeline > 1), shown when a row has them: the predicted
// bubble (issue 35) beside the measured one.
const PIPELINE_COLUMNS = ['bubble_fraction', 'pred_bubble', 'bubble_theory', 'p2p_ms', 'p2p_bytes'];
// The data pipeline's columns (issue 20), shown when a row has them.
const DATA_COLUMNS = ['data_fraction', 'input_bound', 'loader_cpu_ms', 'read_mbps'];

// Issue 17's columns (and a pipeline's) a results table shows by default, each when a row
// has it.
const RESOURCE_COLUMNS = [...PIPELINE_COLUMNS, ...DATA_COLUMNS, 'model_state_bytes_mean', 'optimizer_bytes_mean', 'peak_rss_bytes_mean', 'peak_rss_bytes_ci95',
  'device_peak_bytes_mean', 'cpu_util_mean', 'involuntary_cs_per_s_mean', 'gpu_util_pct_mean', 'gpu_power_w_mean',
  'target_accuracy', 'tta_s_mean', 'tta_s_ci95', 'tta_epochs_mean', 'tta_reached', 'tta_repeats',
  // issue 18: the model's prediction and its error, where one was made; issue 35: the
  // error's verdict against the measured step's own CI (hit, miss, within_noise) beside
  // it, and the compute slowdown applied for co-located ranks
  'pred_step_ms', 'pred_step_err', 'pred_verdict', 'pred_contention', 'pred_efficiency', 'pred_overlap'];

const bytesOrDash = (v) => (v === null || v === undefined ? '—' : fmtBytes(Math.round(v)));
// Byte columns (a message size, each memory figure and its CI, a pipeline's p2p bytes per
// rank and step) as KiB / MiB / GiB.
export const COLUMN_FORMAT = Object.fromEntries(['bytes', 'p2p_bytes',
  ...['params', 'buffers', 'grads', 'optimizer', 'comm', 'activations', 'model_state', 'peak_rss', 'device_peak']
    .flatMap((m) => [`${m}_bytes_mean`, `${m}_bytes_ci95`])].map((c) => [c, bytesOrDash]));

// The spans of a pipeline's schedule: one bar per micro-batch's forward and backward,
// the waits in point-to-point sends and receives greyed.
const PIPELINE_SPANS = [['forward', 'forward', PALETTE[0]], ['backward', 'backward', PALETTE[1]],
  ['p2p', 'p2p wait (send/receive)', '#b8b8b8']];

// A pipeline run's schedule as a Gantt chart (<svg id=pipeline-timeline>) from its Chrome
// trace (GET /v1/runs/{id}/trace): the first traced step, one row per rank labelled
// "stage s · replica r" (rank = replica × stages + stage; sorted by replica, then stage),
// a bar per forward and backward span labelled with its micro-batch index, p2p waits
// grey, the time axis in ms from the step's start. opts: {stages, micro, schedule,
// measured (the run's bubble fraction, null: none reported), run}. The svg carries
// data-ranks, data-spans (bars drawn), data-forward, data-backward, data-p2p, data-step
// ("repeat:step") for tests; the caption gives the measured bubble and the theory.
export function pipelineTimeline(trace, opts) {
  const P = opts.stages, M = opts.micro;
  const theory = (P - 1) / (M + P - 1);
  const pct = (v) => (v * 100).toFixed(1) + '%';
  const fig = el('figure', { class: 'chart pipeline', id: 'pipeline' }, el('figcaption', {}, `Pipeline schedule of run ${opts.run}`));
  const xs = ((trace && trace.traceEvents) || []).filter((e) => e.ph === 'X' && e.tid === 0 && e.args);
  const steps = xs.filter((e) => e.cat === 'step');
  const caption = el('p', { class: 'chart-desc', id: 'pipeline-caption', 'data-bubble': opts.measured === null ? '' : opts.measured, 'data-theory': theory },
    opts.measured === null ? 'Measured bubble: not reported. ' : `Measured bubble: ${pct(opts.measured)} of the ranks' step time (their idle time: step less data, forward, backward, optimizer and exposed communication). `,
    `Theory (P − 1) / (M + P − 1) = ${P - 1}/${M + P - 1} = ${pct(theory)} for P = ${P} stages and M = ${M} micro-batches.`);
  if (!steps.length) {
    fig.append(caption, el('p', { class: 'chart-empty', id: 'pipeline-none' }, 'No traced step: the spec\'s trace_steps traces steps after the warm-up.'));
    return fig;
  }
  const first = steps.reduce((a, e) => (e.args.repeat < a.args.repeat || (e.args.repeat === a.args.repeat && e.args.step < a.args.step) ? e : a));
  const inStep = xs.filter((e) => e.args.repeat === first.args.repeat && e.args.step === first.args.step);
  const stage = (r) => r % P, replica = (r) => Math.floor(r / P);
  const ranks = [...new Set(inStep.map((e) => e.pid))].sort((a, b) => replica(a) - replica(b) || stage(a) - stage(b));
  const t0 = Math.min(...inStep.map((e) => e.ts)), t1 = Math.max(...inStep.map((e) => e.ts + e.dur));
  const ms = (ts) => (ts - t0) / 1000;
  const W = 720, labelW = 140, rowH = 24, gap = 6, top = 8, bottom = 44, right = 16;
  const h = top + ranks.length * (rowH + gap) + bottom;
  const ticks = [];
  const span = Math.max(ms(t1), 1e-3), raw = span / 6, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const stepMs = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => x >= raw);
  for (let v = 0; v <= span + stepMs * 1e-9; v += stepMs) ticks.push(Number(v.toPrecision(12)));
  const hi = Math.max(span, ticks[ticks.length - 1]);
  const px = (v) => labelW + (W - right - labelW) * v / hi;
  const counts = { forward: 0, backward: 0, p2p: 0 };
  const root = svg('svg', { id: 'pipeline-timeline', viewBox: `0 0 ${W} ${h}`, role: 'img',
    'aria-label': `Pipeline schedule of step ${first.args.step}: ${ranks.length} ranks, forward and backward per micro-batch against time`,
    'data-ranks': ranks.length, 'data-step': `${first.args.repeat}:${first.args.step}` });
  const grid = svg('g', { class: 'grid' });
  for (const t of ticks) grid.append(svg('line', { x1: px(t), x2: px(t), y1: top, y2: h - bottom + 4, class: 'minor' }),
    svg('text', { x: px(t), y: h - bottom + 20, 'text-anchor': 'middle' }, fmtNum(t)));
  root.append(grid, svg('text', { class: 'axis-label', x: (labelW + W - right) / 2, y: h - 6, 'text-anchor': 'middle' }, 'time from the step\'s start (ms)'));
  ranks.forEach((rank, i) => {
    const y = top + i * (rowH + gap);
    const label = `stage ${stage(rank)} · replica ${replica(rank)}`;
    const g = svg('g', { class: 'pl-row', 'data-rank': rank, 'data-stage': stage(rank), 'data-replica': replica(rank), 'data-label': label },
      svg('text', { x: labelW - 8, y: y + rowH / 2 + 5, 'text-anchor': 'end' }, label, svg('title', {}, `rank ${rank}: ${label}`)));
    const whole = inStep.find((e) => e.pid === rank && e.cat === 'step');
    if (whole) g.append(svg('rect', { class: 'pl-step', x: px(ms(whole.ts)).toFixed(1), y: y - 1, width: Math.max(0.5, px(ms(whole.ts + whole.dur)) - px(ms(whole.ts))).toFixed(1), height: rowH + 2, fill: 'none', stroke: '#9aa0a8', 'stroke-dasharray': '3 2' }));
    for (const [kind, name, color] of PIPELINE_SPANS) {
      for (const e of inStep.filter((x) => x.pid === rank && x.name === kind)) {
        const x0 = px(ms(e.ts)), w = Math.max(0.5, px(ms(e.ts + e.dur)) - x0);
        const k = e.args.micro_batch;
        const grey = kind === 'p2p';
        const bar = svg('g', { class: `pl-span pl-${kind}`, 'data-micro': k === undefined ? '' : k },
          svg('rect', { x: x0.toFixed(1), y: grey ? y + rowH / 4 : y, width: w.toFixed(1), height: grey ? rowH / 2 : rowH, fill: color, stroke: grey ? null : '#ffffff', 'stroke-width': grey ? null : 0.75 }),
          svg('title', {}, `${label} — ${name}` + (k === undefined ? '' : ` of micro-batch ${k}`) + `: ${fmtNum(e.dur / 1000)} ms from ${fmtNum(ms(e.ts))} ms`));
        // the micro-batch index inside its bar where it fits
        if (!grey && k !== undefined && w >= 9) bar.append(svg('text', { class: 'pl-label', x: (x0 + w / 2).toFixed(1), y: y + rowH / 2 + 5, 'text-anchor': 'middle', fill: '#ffffff', 'font-size': 13 }, String(k)));
        g.append(bar);
        counts[kind]++;
      }
    }
    root.append(g);
  });
  root.setAttribute('data-forward', counts.forward);
  root.setAttribute('data-backward', counts.backward);
  root.setAttribute('data-p2p', counts.p2p);
  root.setAttribute('data-spans', counts.forward + counts.backward + counts.p2p);
  fig.append(el('p', { class: 'chart-desc' }, `${opts.schedule || 'the'} schedule, step ${first.args.step} of repeat ${first.args.repeat} (the first traced); each bar is one micro-batch, its index inside; dashed: each rank's whole step.`),
    root, legend(PIPELINE_SPANS.map(([, name, color]) => ({ name, color, rect: true }))), caption);
  return fig;
}

export function describeRun(run) {
  const p = run.params && Object.keys(run.params).length ? Object.entries(run.params).map(([k, v]) => `${k}=${v}`).join(', ') : `world_size=${run.world_size}`;
  return `run ${run.id} (${p})`;
}

export function noResults(text) {
  return el('p', { class: 'muted' }, text);
}

export { fmtNum };
