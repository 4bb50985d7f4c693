// pages/experiment: one experiment, live: its runs with progress (Server-Sent Events
// from /v1/experiments/{id}/events), its results table, and the charts that fit its
// workload (collective: busbw and time against message size; training: throughput and
// efficiency against world size, step-time breakdown, loss and accuracy per epoch, the
// per-rank spread of one run's steps).
//
// Decision: events update the runs table in place (cheap, every event); results and
// charts are refetched from the API, at most once a second while results stream in and
// once more when a run ends, so what is drawn is always what the API stores.
import { api, el, fmtAge, fmtBytes, fmtDuration, fmtNum, statusBadge, dataTable, downloadButtons, errorBox, mapLimit, announce, TERMINAL } from '../util.js';
import { collectiveCharts, trainingCharts, epochCharts, perClassTable, stragglers, whatIfChart, mainColumns, COLUMN_FORMAT, describeRun, pipelineTimeline } from '../figures.js';

// The daemon pages an experiment's runs (100 by default); this page shows them all, and an
// experiment has at most 1,024 (the sweep limit), which one page may ask for.
const ALL_RUNS = 'runs_limit=1024';

export async function renderExperiment(main, id, query) {
  const expPath = `/v1/experiments/${id}?${ALL_RUNS}`;
  let exp = await api(expPath);
  let table = null, allCols = query.get('all') === '1', groupBy = query.get('group_by') || '';
  let refreshing = false, again = false, timer = null, lastRefresh = 0, stepsRun = null, ranksRun = null;
  const selected = new Set();

  const title = el('h1', {});
  const summary = el('div', { class: 'summary', id: 'summary' });
  const failures = el('div', { id: 'failures' });
  const runsBox = el('div', { id: 'runs' });
  const resultsBox = el('div', { id: 'results' });
  const chartsBox = el('div', { class: 'charts', id: 'charts' });
  const epochsBox = el('div', { class: 'charts', id: 'epoch-charts' });
  const stragglerBox = el('div', { id: 'stragglers' });
  const whatIfBox = el('div', { class: 'charts', id: 'what-if' });
  const fitsBox = el('div', { id: 'fits' });
  const linkBw = el('input', { id: 'whatif-bw', type: 'number', min: '0', step: 'any', placeholder: 'fitted', size: 8 });
  const linkLat = el('input', { id: 'whatif-lat', type: 'number', min: '0', step: 'any', placeholder: 'fitted', size: 8 });
  const maxWorld = el('select', { id: 'whatif-max' }, [16, 64, 256, 1024].map((n) => el('option', { value: n, selected: n === 64 }, String(n))));
  const ranksBox = el('div', { id: 'ranks' });
  const groupIn = el('input', { id: 'group-by', type: 'text', value: groupBy, placeholder: 'swept fields', size: 24 });
  const allBox = el('input', { id: 'all-cols', type: 'checkbox', checked: allCols });
  const compareBtn = el('button', { type: 'button', disabled: true, onclick: () => { location.hash = `#/compare?r=${[...selected].join(',')}`; } }, 'Compare selected runs');
  const training = exp.workload !== 'collective';

  const resultsName = () => `experiment-${id}-results` + (groupBy ? '-by-' + groupBy.replace(/,/g, '-') : '');
  const resultsQuery = () => (groupBy ? `?group_by=${encodeURIComponent(groupBy)}` : '');

  main.append(title, summary, failures,
    el('details', {}, el('summary', {}, 'Spec (normalized, defaults filled in)'), el('pre', { class: 'spec' }, JSON.stringify(exp.spec, null, 2))),
    el('h2', {}, 'Runs'), runsBox, el('div', { class: 'toolbar' }, compareBtn),
    el('h2', {}, 'Each rank: where it ran, its memory and CPU, its timeline'), ranksBox,
    el('h2', {}, 'Results'),
    el('form', { class: 'toolbar', onsubmit: (ev) => { ev.preventDefault(); groupBy = groupIn.value.replace(/\s+/g, ''); refresh(); } },
      el('div', { class: 'field' }, el('label', { for: 'group-by' }, 'Group by (spec fields, comma-separated)'), groupIn),
      el('button', { type: 'submit' }, 'Regroup'),
      el('label', {}, allBox, ' all columns'),
      downloadButtons(() => ({ name: resultsName(), columns: table ? table.columns : [], rows: table ? table.rows : [], json: table }),
        () => `/v1/experiments/${id}/results${resultsQuery() ? resultsQuery() + '&' : '?'}format=csv`)),
    resultsBox,
    el('h2', {}, 'Charts'), chartsBox,
    ...(training ? [] : [el('h2', {}, 'Network fits: T = α + β·bytes'), fitsBox]),
    ...(training ? [el('h2', {}, 'What if: the performance model'),
      el('form', { class: 'toolbar', id: 'whatif-form', onsubmit: (ev) => { ev.preventDefault(); drawWhatIf(); } },
        el('div', { class: 'field' }, el('label', { for: 'whatif-bw' }, 'Link Gbit/s (empty: the network fits)'), linkBw),
        el('div', { class: 'field' }, el('label', { for: 'whatif-lat' }, 'Latency µs'), linkLat),
        el('div', { class: 'field' }, el('label', { for: 'whatif-max' }, 'Up to ranks'), maxWorld),
        el('button', { type: 'submit' }, 'Predict')),
      whatIfBox,
      el('h2', {}, 'Loss and accuracy'), epochsBox, el('h2', {}, 'Per-rank spread (stragglers)'), stragglerBox] : []));
  allBox.addEventListener('change', () => { allCols = allBox.checked; drawTable(); });

  function drawHeader() {
    title.replaceChildren(`Experiment ${exp.id}: ${exp.name} `, statusBadge(exp.status));
    summary.replaceChildren(el('dl', { class: 'kv' },
      el('dt', {}, 'Status'), el('dd', { id: 'exp-status', 'data-status': exp.status }, exp.status),
      el('dt', {}, 'Progress'), el('dd', {}, el('progress', { max: exp.n_runs, value: exp.runs_finished, 'aria-label': 'runs finished' }), el('span', { class: 'progress-text', id: 'exp-progress' }, `${exp.runs_finished} / ${exp.n_runs} runs finished`)),
      el('dt', {}, 'Workload'), el('dd', {}, exp.workload + (exp.spec.model ? ` · ${exp.spec.model}` : '') + (exp.spec.op ? ` · ${exp.spec.op}` : '')),
      el('dt', {}, 'Created'), el('dd', { title: exp.created_at }, fmtAge(exp.created_at) + (exp.duration_s !== null ? ` · took ${fmtDuration(exp.duration_s)}` : '')),
      // the daemon's --network-profile (deploy/netlab.sh); absent: the host network as is
      exp.runs.some((r) => r.network_profile) ? [el('dt', {}, 'Network'), el('dd', { id: 'exp-network' }, [...new Set(exp.runs.map((r) => r.network_profile || 'host'))].join(', '))] : null),
      el('div', { class: 'toolbar' },
        TERMINAL.includes(exp.status) ? null : el('button', { type: 'button', class: 'danger', onclick: cancel }, 'Cancel experiment'),
        el('a', { class: 'button', href: `#/compare?e=${exp.id}` }, 'Compare with other experiments'),
        el('a', { class: 'button', id: 'report-link', href: `/v1/experiments/${exp.id}/report`, target: '_blank' }, 'Report (HTML, printable)')));
    const failed = exp.runs.filter((r) => r.error);
    failures.replaceChildren(...failed.map((r) => el('div', { class: 'error', role: 'alert' },
      el('strong', {}, `${describeRun(r)} ${r.status}: `), r.error + (r.error_rank !== null && r.error_rank !== undefined ? ` (rank ${r.error_rank})` : ''))));
  }

  async function cancel() {
    try { await api(`/v1/experiments/${id}/cancel`, { method: 'POST' }); exp = await api(expPath); drawHeader(); drawRuns(); }
    catch (e) { failures.prepend(errorBox('Cancel failed', e)); }
  }

  function runRow(r) {
    const box = el('input', { type: 'checkbox', 'aria-label': `select run ${r.id} to compare`, checked: selected.has(r.id),
      onchange: (ev) => { ev.target.checked ? selected.add(r.id) : selected.delete(r.id); compareBtn.disabled = selected.size === 0; } });
    return el('tr', { 'data-run': r.id, 'data-status': r.status },
      el('td', {}, box),
      el('td', { class: 'num' }, r.id),
      el('td', {}, r.params && Object.keys(r.params).length ? Object.entries(r.params).map(([k, v]) => `${k}=${v}`).join(', ') : '—'),
      el('td', { class: 'num' }, r.world_size),
      // the placement it got: nodes × the most ranks on one (null until placed)
      el('td', { class: 'num', 'data-col': 'nodes' }, r.nodes ? `${r.nodes} × ${r.ranks_per_node}` : '—'),
      el('td', {}, statusBadge(r.status)),
      el('td', {}, el('progress', { max: 1, value: r.progress || 0, 'aria-label': `progress of run ${r.id}` }),
        el('span', { class: 'progress-text' }, `${Math.round((r.progress || 0) * 100)}%` + (r.phase && !TERMINAL.includes(r.status) ? ` · ${r.phase}` : ''))),
      el('td', { class: 'num' }, fmtDuration(r.duration_s)),
      el('td', { class: 'wrap run-error' }, r.error ? r.error + (r.error_rank !== null && r.error_rank !== undefined ? ` (rank ${r.error_rank})` : '') : ''));
  }

  function drawRuns() {
    runsBox.replaceChildren(el('div', { class: 'table-wrap' }, el('table', { class: 'data', id: 'runs-table' },
      el('caption', {}, 'Runs (one per sweep point; live)'),
      el('thead', {}, el('tr', {}, ['Compare', 'Run', 'Parameters', 'World size', 'Nodes', 'Status', 'Progress', 'Duration', 'Error'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, exp.runs.map(runRow)))));
  }

  function drawTable() {
    if (!table) return;
    if (!table.rows.length) { resultsBox.replaceChildren(el('p', { class: 'muted', id: 'no-results' }, TERMINAL.includes(exp.status) ? 'No results were stored.' : 'No results yet: they appear as runs report.')); return; }
    const cols = allCols ? table.columns : mainColumns(table);
    resultsBox.replaceChildren(dataTable(cols, table.rows, { caption: `Results grouped by ${table.group_by.join(', ') || '(nothing swept)'}: mean, 95% CI half-width, median, p95 and sample count (n)`, className: 'results', format: COLUMN_FORMAT }));
    resultsBox.querySelector('table').id = 'results-table';
  }

  async function drawTraining() {
    const runs = await mapLimit(exp.runs.filter((r) => r.status !== 'queued'), 4, (r) => api(`/v1/runs/${r.id}`).catch(() => null));
    const sources = runs.filter(Boolean).map((r) => ({ label: describeRun(r), epochs: r.epochs, dataset: r.spec && r.spec.dataset && r.spec.dataset.name }));
    epochsBox.replaceChildren(...epochCharts(sources), ...perClassTable(sources));
    const candidates = exp.runs.filter((r) => r.status !== 'queued');
    if (!candidates.length) { stragglerBox.replaceChildren(el('p', { class: 'muted' }, 'No run has started yet.')); return; }
    if (!stepsRun || !candidates.some((r) => r.id === stepsRun)) stepsRun = [...candidates].sort((a, b) => b.world_size - a.world_size)[0].id;
    const sel = el('select', { id: 'steps-run' }, candidates.map((r) => el('option', { value: r.id, selected: r.id === stepsRun }, describeRun(r))));
    sel.addEventListener('change', () => { stepsRun = Number(sel.value); drawTraining(); });
    let steps;
    try { steps = await api(`/v1/runs/${stepsRun}/steps`); } catch (e) { stragglerBox.replaceChildren(errorBox('Cannot read the steps', e)); return; }
    const shown = runs.find((r) => r && r.id === stepsRun);
    const s = stragglers(steps, shown && shown.generations);
    const flat = steps.rows.map((row) => Object.fromEntries(steps.columns.map((c, i) => [c, row[i]])));
    stragglerBox.replaceChildren(
      el('div', { class: 'toolbar' }, el('div', { class: 'field' }, el('label', { for: 'steps-run' }, 'Run'), sel),
        downloadButtons(() => ({ name: `run-${stepsRun}-steps`, columns: steps.columns, rows: flat, json: steps }))),
      el('div', { class: 'charts' }, s.chart, ...(s.worldChart ? [s.worldChart] : [])),
      // below the chart at full width: in a grid cell its caption and last column were cut
      el('p', { class: 'muted' }, 'slowest_share: the fraction of steps in which the rank was the slowest.'),
      dataTable(s.columns, s.rows, { caption: `Per-rank step time of run ${stepsRun}`, format: { slowest_share: (v) => v === null ? '—' : (v * 100).toFixed(0) + '%' } }));
  }

  // POST /v1/predict from this experiment's one-rank runs: every strategy's curve up to the
  // chosen world size, over the network fits or the link typed in, with the measured
  // speed-ups on the same axes.
  async function drawWhatIf() {
    const worlds = [];
    for (let n = 1; n <= Number(maxWorld.value); n *= 2) worlds.push(n);
    const body = { experiment: exp.id, world_sizes: worlds };
    if (linkBw.value) body.link = { bandwidth_gbps: Number(linkBw.value), latency_us: Number(linkLat.value || 0) };
    let pred;
    try {
      pred = await api('/v1/predict', { method: 'POST', body: JSON.stringify(body) });
    } catch (e) {
      whatIfBox.replaceChildren(el('p', { class: 'muted', id: 'whatif-none' }, `No prediction: ${e.message}`));
      return;
    }
    const notes = pred.predictions.filter((c) => c.comm_exceeds_backward_at).map((c) => `${c.strategy}: the exchanges outlast backward from ${c.comm_exceeds_backward_at} ranks`);
    const src = pred.link ? `a link of ${pred.link.bandwidth_gbps} Gbit/s and ${pred.link.latency_us} µs` : `fits ${pred.fits.map((f) => f.id).join(', ')} (experiment ${[...new Set(pred.fits.map((f) => f.experiment))].join(', ')})`;
    whatIfBox.replaceChildren(whatIfChart(pred, table && table.workload === 'train' ? table : null),
      el('p', { class: 'muted', id: 'whatif-source' }, `Network: ${src}. ` + (notes.length ? notes.join('; ') + '.' : 'Communication stays behind backward up to the largest world size shown.')));
  }

  // GET /v1/experiments/ID/fit: the latency-bandwidth fit of each op the experiment timed,
  // which training experiments' predictions then name by id.
  async function drawFits() {
    let reply;
    try { reply = await api(`/v1/experiments/${id}/fit`); } catch (e) { fitsBox.replaceChildren(errorBox('Cannot read the fits', e)); return; }
    const cols = ['id', 'op', 'algorithm', 'world_size', 'nodes', 'alpha_us', 'beta_ns_per_byte', 'bandwidth_gbs', 'gamma_ns_per_byte', 'r2', 'worst_residual', 'points', 'min_bytes', 'max_bytes'];
    const num = (v) => (v === null || v === undefined ? '—' : fmtNum(v));
    fitsBox.replaceChildren(reply.fits.length
      ? dataTable(cols, reply.fits, { caption: `Fits of model version ${reply.model_version}: least squares on relative residuals; gamma is the reduction's part of beta where an all_gather separates it`, format: { id: (v) => (v === null ? 'not stored yet' : String(v)), alpha_us: num, beta_ns_per_byte: num, bandwidth_gbs: num, gamma_ns_per_byte: num, r2: num, worst_residual: (v) => (v === null ? '—' : (v * 100).toFixed(1) + '%'), min_bytes: fmtBytes, max_bytes: fmtBytes } })
      : el('p', { class: 'muted' }, 'No fit yet: each needs two sizes or more of one op and algorithm.'));
    const t = fitsBox.querySelector('table');
    if (t) t.id = 'fits-table';
  }

  // A pipeline run's schedule (spec pipeline > 1): its first traced step from the trace,
  // and its bubble measured over the steps (every rank's idle time over its step time).
  async function pipelineFigure(run, stages) {
    let trace, steps;
    try {
      [trace, steps] = await Promise.all([api(`/v1/runs/${run.id}/trace`), api(`/v1/runs/${run.id}/steps`)]);
    } catch (e) {
      return errorBox('Cannot read the pipeline schedule', e);
    }
    const at = Object.fromEntries(steps.columns.map((c, i) => [c, i]));
    let idle = 0, total = 0;
    for (const row of steps.rows) {
      if (at.bubble_ms === undefined || row[at.bubble_ms] === null) continue;
      idle += row[at.bubble_ms];
      total += row[at.step_ms];
    }
    return pipelineTimeline(trace, { stages, micro: Number(run.spec.micro_batches) || 1, schedule: run.spec.schedule,
      measured: total > 0 ? idle / total : null, run: run.id });
  }

  // One run's ranks (GET /v1/runs/ID): the node each ran on, its process and how it ended.
  async function drawRanks() {
    const candidates = exp.runs.filter((r) => r.status !== 'queued');
    if (!candidates.length) { ranksBox.replaceChildren(el('p', { class: 'muted' }, 'No run has started yet.')); return; }
    if (!ranksRun || !candidates.some((r) => r.id === ranksRun)) ranksRun = [...candidates].sort((a, b) => b.world_size - a.world_size)[0].id;
    const sel = el('select', { id: 'ranks-run' }, candidates.map((r) => el('option', { value: r.id, selected: r.id === ranksRun }, describeRun(r))));
    sel.addEventListener('change', () => { ranksRun = Number(sel.value); drawRanks(); });
    let run;
    try { run = await api(`/v1/runs/${ranksRun}`); } catch (e) { ranksBox.replaceChildren(errorBox('Cannot read the run', e)); return; }
    const cols = ['rank', 'node', 'host', 'pid', 'cpus', 'gpu', 'status', 'exit_code', 'signal'];
    const dash = (v) => v === null || v === undefined ? '—' : String(v);
    const bytes = (v) => v === null || v === undefined ? '—' : fmtBytes(v);
    const memCols = ['rank', 'repeat', 'params_bytes', 'grads_bytes', 'optimizer_bytes', 'comm_bytes', 'activations_bytes', 'peak_rss_bytes', 'device_peak_bytes'];
    const useCols = ['rank', 'repeat', 'steps', 'wall_s', 'user_s', 'sys_s', 'cpu_util', 'voluntary_cs', 'involuntary_cs', 'gpu_util_pct', 'gpu_power_w'];
    const extra = [];
    if ((run.memory || []).length) {
      extra.push(dataTable(memCols, run.memory, { caption: `Memory of run ${run.id} per rank (bytes; model state exact, peak RSS measured)`, format: Object.fromEntries(memCols.map((c) => [c, c.endsWith('_bytes') ? bytes : dash])) }));
      extra[extra.length - 1].querySelector('table').id = 'memory-table';
    }
    if ((run.usage || []).length) {
      extra.push(dataTable(useCols, run.usage, { caption: `CPU and GPU use of run ${run.id} per rank (cores = (user + sys) / wall)`, format: { rank: String, repeat: String, gpu_util_pct: (v) => v === null ? '—' : fmtNum(v), gpu_power_w: (v) => v === null ? '—' : fmtNum(v) } }));
      extra[extra.length - 1].querySelector('table').id = 'usage-table';
    }
    const trace = el('a', { id: 'trace-link', href: `/v1/runs/${run.id}/trace`, download: `run-${run.id}-trace.json` }, `Timeline of run ${run.id} (Chrome trace JSON)`);
    const stages = Number(run.spec && run.spec.pipeline) || 1;
    if (stages > 1) extra.push(await pipelineFigure(run, stages));
    ranksBox.replaceChildren(
      el('div', { class: 'toolbar' }, el('div', { class: 'field' }, el('label', { for: 'ranks-run' }, 'Run'), sel),
        el('p', {}, trace, el('span', { class: 'muted' }, ' — open it in ui.perfetto.dev or chrome://tracing: each rank\'s steps and phases, its collectives from launch to completion'))),
      dataTable(cols, run.ranks, { caption: `Ranks of run ${run.id}` + (run.nodes ? ` across ${run.nodes} node${run.nodes === 1 ? '' : 's'}` : ''), format: { rank: String, pid: String, exit_code: dash, signal: dash, gpu: dash } }),
      ...extra);
    ranksBox.querySelector('table').id = 'ranks-table';
  }

  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    lastRefresh = Date.now();
    // the experiment status the fetched table reflects: once it is terminal, the table is
    // final (the header can show the new status before its refresh has landed)
    const asOf = exp.status;
    try {
      table = await api(`/v1/experiments/${id}/results${resultsQuery()}`);
      drawTable();
      resultsBox.dataset.asOf = asOf;
      const src = [{ label: exp.name, table }];
      chartsBox.replaceChildren(...(table.workload === 'collective' ? collectiveCharts(src) : trainingCharts(src)));
      await drawRanks();
      if (training) await drawTraining();
      if (training && TERMINAL.includes(asOf) && !whatIfBox.dataset.drawn) { whatIfBox.dataset.drawn = '1'; await drawWhatIf(); }
      if (!training) await drawFits();
    } catch (e) {
      resultsBox.replaceChildren(errorBox('Cannot read the results', e));
    } finally {
      refreshing = false;
      if (again) { again = false; refresh(); }
    }
  }

  // At most one refresh a second while events stream in.
  function refreshSoon(delay = 300) {
    if (timer) return;
    const wait = Math.max(delay, 1000 - (Date.now() - lastRefresh));
    timer = setTimeout(() => { timer = null; refresh(); }, wait);
  }

  const es = new EventSource(`/v1/experiments/${id}/events`);
  es.addEventListener('snapshot', (ev) => { exp = JSON.parse(ev.data); drawHeader(); drawRuns(); refreshSoon(0); });
  es.addEventListener('run', (ev) => {
    const d = JSON.parse(ev.data);
    const r = exp.runs.find((x) => x.id === d.run);
    if (!r) return;
    Object.assign(r, { status: d.status, error: d.error || r.error || null, error_rank: d.error_rank !== undefined ? d.error_rank : r.error_rank });
    if (TERMINAL.includes(d.status)) {
      // duration and final progress are the API's: refetch the experiment
      api(expPath).then((x) => { exp = x; drawHeader(); drawRuns(); }).catch(() => {});
      refreshSoon(0);
      announce(`Run ${r.id} ${d.status}`);
    }
    drawRuns();
  });
  es.addEventListener('progress', (ev) => {
    const d = JSON.parse(ev.data);
    const r = exp.runs.find((x) => x.id === d.run);
    if (!r) return;
    r.progress = d.progress; r.phase = d.phase;
    const tr = runsBox.querySelector(`tr[data-run="${r.id}"]`);
    if (tr) tr.replaceWith(runRow(r));
  });
  for (const t of ['collective', 'epoch']) es.addEventListener(t, () => refreshSoon());
  es.addEventListener('experiment', (ev) => {
    const d = JSON.parse(ev.data);
    exp.status = d.status; exp.runs_finished = d.runs_finished;
    if (TERMINAL.includes(d.status)) api(expPath).then((x) => { exp = x; drawHeader(); drawRuns(); refreshSoon(0); }).catch(() => {});
    drawHeader();
    announce(`Experiment ${d.status}`);
  });
  es.addEventListener('lagged', () => refreshSoon(0));

  drawHeader();
  drawRuns();
  await refresh();
  return () => { es.close(); clearTimeout(timer); };
}

export { fmtNum };
