// charts: line charts (linear or log axes, error bars, dashed reference lines) and
// horizontal stacked bars, drawn as SVG.
//
// Decision: our own ~250 lines instead of a chart library: the dashboard needs exactly
// these two kinds, must work offline with no build step, and SVG elements are plain DOM
// (each point is a <circle class="pt"> with a <title>), so they scale with the page,
// print, and can be counted by the browser test. Colours are the Okabe-Ito palette,
// distinguishable with the common colour-vision deficiencies; series also differ by
// dash so no meaning rests on colour alone.
import { el, svg, fmtNum } from './util.js';

export const PALETTE = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#333333', '#8C6D31'];
const DASHES = [null, '6 3', '2 3', '8 3 2 3'];
const W = 640, H = 330, M = { l: 70, r: 16, t: 12, b: 52 };
let clipCount = 0; // clip-path ids unique within the page

// Ticks of a linear axis: about n round numbers covering [lo, hi].
// integer: only whole numbers (world sizes, epochs, steps).
function linearTicks(lo, hi, n = 6, integer = false) {
  if (hi === lo) { hi = lo + 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  if (integer) step = Math.max(1, Math.round(step));
  const t = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push(Number(v.toPrecision(12)));
  return { lo: Math.min(lo, t[0]), hi: Math.max(hi, t[t.length - 1]), ticks: t };
}

// Ticks of a log axis: the powers of base in range, thinned to at most ~8.
function logTicks(lo, hi, base) {
  const a = Math.floor(Math.log(lo) / Math.log(base) + 1e-9), b = Math.ceil(Math.log(hi) / Math.log(base) - 1e-9);
  const every = Math.max(1, Math.ceil((b - a + 1) / 8));
  const t = [];
  for (let k = a; k <= b; k += every) t.push(Math.pow(base, k));
  return { lo: Math.pow(base, a), hi: Math.pow(base, Math.max(b, a + 1)), ticks: t };
}

function axis(values, spec) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (spec.log) {
    const pos = values.filter((v) => v > 0);
    lo = Math.min(...pos); hi = Math.max(...pos);
    const t = logTicks(lo, hi, spec.log);
    const f = (v) => Math.log(v);
    return { ...t, scale: (v, a, b) => a + (b - a) * (f(v) - f(t.lo)) / (f(t.hi) - f(t.lo) || 1) };
  }
  if (spec.zero !== false) lo = Math.min(lo, 0);
  if (spec.max !== undefined) hi = Math.max(hi, spec.max);
  if (lo === hi) { lo -= 1; hi += 1; }
  const t = linearTicks(lo, hi, 6, spec.integer);
  return { ...t, scale: (v, a, b) => a + (b - a) * (v - t.lo) / (t.hi - t.lo) };
}

export function legend(items) {
  return el('ul', { class: 'legend' }, items.map((it) => el('li', {},
    svg('svg', { width: 28, height: 10, 'aria-hidden': 'true' },
      it.rect ? svg('rect', { x: 4, y: 0, width: 20, height: 10, fill: it.color })
        : svg('line', { x1: 2, y1: 5, x2: 26, y2: 5, stroke: it.color, 'stroke-width': 2.5, 'stroke-dasharray': it.dash })),
    it.name)));
}

function frame(title, desc) {
  return el('figure', { class: 'chart' }, el('figcaption', {}, title), desc ? el('p', { class: 'chart-desc' }, desc) : null);
}

function empty(fig, text) {
  fig.appendChild(el('p', { class: 'chart-empty' }, text || 'No data yet.'));
  return fig;
}

// opts: {title, desc, x: {label, log, format}, y: {label, log, format, zero, max},
//        series: [{name, points: [{x, y, lo?, hi?}], dash?, color?, ref?}]}
// A series with ref: true is a reference (the ideal line): dashed, no point markers; one
// with model: true is a prediction: its points hollow.
// opts.marks: optional [{x, label, fault}], vertical lines across the plot at x.
export function lineChart(opts) {
  const fig = frame(opts.title, opts.desc);
  // a log axis cannot show values <= 0: such points are left out, such error bars cut
  const series = opts.series.map((s) => ({ ...s, points: s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y) && (!opts.x.log || p.x > 0) && (!opts.y.log || p.y > 0))
    .map((p) => (opts.y.log && !(p.lo > 0) ? { ...p, lo: undefined, hi: undefined } : p)) }))
    .filter((s) => s.points.length);
  const data = series.filter((s) => !s.ref);
  if (!data.length) return empty(fig, opts.empty);
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  // the axes fit the values, not their error bars: one wide interval (two samples) must
  // not flatten every curve; bars are clipped to the plot instead
  const ys = series.flatMap((s) => s.points.map((p) => p.y));
  const X = axis(xs, { zero: false, ...opts.x }), Y = axis(ys, opts.y);
  const px = (v) => X.scale(v, M.l, W - M.r), py = (v) => Y.scale(v, H - M.b, M.t);
  const fx = opts.x.format || fmtNum, fy = opts.y.format || fmtNum;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${opts.title}: ${opts.y.label} against ${opts.x.label}, ${data.length} series` });
  // series are clipped to the plot area: an error bar or a reference line that runs past
  // the axes' range ends at the frame (its full value is in the point's tooltip)
  const clipId = `clip-${++clipCount}`;
  root.append(svg('defs', {}, svg('clipPath', { id: clipId }, svg('rect', { x: M.l, y: M.t - 4, width: W - M.r - M.l + 4, height: H - M.b - M.t + 8 }))));
  const grid = svg('g', { class: 'grid' });
  for (const t of Y.ticks) {
    grid.append(svg('line', { x1: M.l, x2: W - M.r, y1: py(t), y2: py(t) }),
      svg('text', { x: M.l - 6, y: py(t) + 4, 'text-anchor': 'end' }, fy(t)));
  }
  for (const t of X.ticks) {
    grid.append(svg('line', { x1: px(t), x2: px(t), y1: M.t, y2: H - M.b, class: 'minor' }),
      svg('text', { x: px(t), y: H - M.b + 18, 'text-anchor': 'middle' }, fx(t)));
  }
  root.append(grid,
    svg('line', { class: 'axis', x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }),
    svg('line', { class: 'axis', x1: M.l, x2: M.l, y1: M.t, y2: H - M.b }),
    svg('text', { class: 'axis-label', x: (M.l + W - M.r) / 2, y: H - 8, 'text-anchor': 'middle' }, opts.x.label + (opts.x.log ? ' (log scale)' : '')),
    svg('text', { class: 'axis-label', x: 14, y: (M.t + H - M.b) / 2, 'text-anchor': 'middle', transform: `rotate(-90 14 ${(M.t + H - M.b) / 2})` }, opts.y.label));
  // marks: vertical lines at x with a label (an elastic run's generations; its fault, red)
  for (const m of opts.marks || []) {
    root.append(svg('g', { class: m.fault ? 'mark fault' : 'mark' },
      svg('line', { x1: px(m.x), x2: px(m.x), y1: M.t, y2: H - M.b, stroke: m.fault ? '#c0392b' : '#555555', 'stroke-width': 1.5, 'stroke-dasharray': m.fault ? 'none' : '4 3' }),
      // a fault's label under a generation's: both often mark the same step
      svg('text', { x: px(m.x) + 3, y: M.t + (m.fault ? 24 : 10), 'font-size': 10, fill: m.fault ? '#c0392b' : '#555555' }, m.label),
      svg('title', {}, `${m.label} at ${opts.x.label} ${fmtNum(m.x)}`)));
  }
  const items = [];
  let k = 0;
  for (const s of series) {
    const color = s.color || (s.ref ? '#555555' : PALETTE[k % PALETTE.length]);
    const dash = s.ref ? '5 4' : (s.dash !== undefined ? s.dash : DASHES[Math.floor(k / PALETTE.length) % DASHES.length]);
    if (!s.ref) k++;
    const g = svg('g', { class: s.ref ? 'series ref' : 'series', 'clip-path': `url(#${clipId})` });
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    g.append(svg('polyline', { class: 'series-line', points: pts.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' '), fill: 'none', stroke: color, 'stroke-width': s.ref ? 1.5 : 2, 'stroke-dasharray': dash }));
    if (!s.ref) {
      for (const p of pts) {
        if (Number.isFinite(p.lo) && Number.isFinite(p.hi) && p.hi > p.lo)
          g.append(svg('line', { class: 'err', x1: px(p.x), x2: px(p.x), y1: py(Math.max(p.lo, Y.lo)), y2: py(Math.min(p.hi, Y.hi)), stroke: color }));
        // a model's points are hollow: predicted, not measured
        g.append(svg('circle', { class: s.model ? 'model-pt' : 'pt', cx: px(p.x).toFixed(1), cy: py(p.y).toFixed(1), r: 3.5, fill: s.model ? '#ffffff' : color, stroke: color, 'stroke-width': s.model ? 1.5 : 0 },
          svg('title', {}, `${s.name}: ${opts.x.label} ${fx(p.x)}, ${opts.y.label} ${fy(p.y)}` + (Number.isFinite(p.lo) && Number.isFinite(p.hi) ? ` (95% CI ${fy(p.lo)} to ${fy(p.hi)})` : ''))));
      }
    }
    root.append(g);
    items.push({ name: s.name, color, dash });
  }
  fig.append(root, legend(items));
  return fig;
}

// opts: {title, desc, unit, categories: [label], segments: [{name, values: [number]}]}
// One horizontal bar per category, its segments stacked left to right.
export function stackedBars(opts) {
  const fig = frame(opts.title, opts.desc);
  const n = opts.categories.length;
  const totals = opts.categories.map((_, i) => opts.segments.reduce((a, s) => a + (Number.isFinite(s.values[i]) ? s.values[i] : 0), 0));
  if (!n || !totals.some((t) => t > 0)) return empty(fig, opts.empty);
  // the label column as wide as the longest label needs (about 7 px a character at the
  // chart's font), up to half the chart; a longer label is cut at its end, never its start
  const longest = Math.max(...opts.categories.map((c) => c.length));
  const labelW = Math.min(W / 2, Math.max(110, longest * 7 + 14)), maxChars = Math.floor((labelW - 14) / 7);
  const barH = 22, gap = 10, h = M.t + n * (barH + gap) + 40;
  const X = axis(totals, { zero: true });
  const px = (v) => X.scale(v, labelW, W - M.r);
  const root = svg('svg', { viewBox: `0 0 ${W} ${h}`, role: 'img', 'aria-label': `${opts.title}: ${n} bars of ${opts.segments.map((s) => s.name).join(', ')}` });
  const grid = svg('g', { class: 'grid' });
  for (const t of X.ticks) grid.append(svg('line', { x1: px(t), x2: px(t), y1: M.t, y2: h - 34 }), svg('text', { x: px(t), y: h - 20, 'text-anchor': 'middle' }, fmtNum(t)));
  root.append(grid, svg('text', { class: 'axis-label', x: (labelW + W) / 2, y: h - 4, 'text-anchor': 'middle' }, opts.unit));
  opts.categories.forEach((cat, i) => {
    const y = M.t + i * (barH + gap);
    const label = cat.length > maxChars ? cat.slice(0, maxChars - 1) + '…' : cat;
    root.append(svg('text', { x: labelW - 8, y: y + barH / 2 + 4, 'text-anchor': 'end' }, label, svg('title', {}, cat)));
    let acc = 0;
    opts.segments.forEach((s, j) => {
      const v = Number.isFinite(s.values[i]) ? s.values[i] : 0;
      if (v > 0) root.append(svg('rect', { class: 'bar', x: px(acc).toFixed(1), y, width: Math.max(0.5, px(acc + v) - px(acc)).toFixed(1), height: barH, fill: PALETTE[j % PALETTE.length] },
        svg('title', {}, `${cat} — ${s.name}: ${fmtNum(v)} ${opts.unit}`)));
      acc += v;
    });
  });
  fig.append(root, legend(opts.segments.map((s, j) => ({ name: s.name, color: PALETTE[j % PALETTE.length], rect: true }))));
  return fig;
}
