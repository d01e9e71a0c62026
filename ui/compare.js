// Ferry console: runs compared (#/compare?runs=12,14,…), MLflow's comparison
// view for Ferry's runs. Built from routes that exist: each run's JSON
// (GET /runs/{id}: its params, state, workflow, and each step's final
// metrics, the evaluate steps' metrics.json) and, for the few steps of each
// run that may have written training curves, their monitor (GET
// …/steps/{step}/monitor: $FERRY_METRICS_FILE's series, 512 points a series
// at most). Shows a header per run, the final metrics side by side (the
// best value a row starred, each run's difference from the first, rows
// whose values differ marked), the params side by side (rows that differ
// marked), and one chart a metric name with a series a run and step
// ("run 12 · train"). Read once: a finished run's figures do not move, and
// a running one is read again by reloading the page.

import { el, stateBadge, timeCell, duration, callJSON, setView, viewSignal, quiet } from './lib.js';
import { lowerIsBetter } from './models.js';
import { lineChart, uplot } from './charts.js';

export const MAX_RUNS = 10; // the most runs one page compares (the runs list offers 2 to 5)
const CURVE_STEPS = 8; // a run's steps whose monitor is asked for its curves, train steps first
const CURVE_KINDS = ['train', 'run', 'evaluate']; // the kinds that run a job, which may write $FERRY_METRICS_FILE

// A value as written: numbers keep up to 6 significant digits; anything else as JSON.
function fmt(v) {
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6)));
  if (v === undefined || v === null) return '—';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

// The same value, whatever its type: how rows are told to differ.
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// "12,14,12,x" → [12, 14]: run ids in the order given, each once, at most MAX_RUNS.
export function parseRuns(s) {
  const ids = [];
  for (const part of String(s || '').split(',')) {
    const t = part.trim();
    if (!/^\d{1,18}$/.test(t) || ids.includes(Number(t))) continue;
    ids.push(Number(t));
  }
  return ids;
}

export async function comparePage(params) {
  const signal = viewSignal();
  const all = parseRuns(params.get('runs'));
  const ids = all.slice(0, MAX_RUNS);
  const back = el('p', {}, el('a', { href: '#/runs' }, '← Runs'));
  if (ids.length < 2) {
    setView(back, el('h1', {}, 'Runs compared'),
      el('p', { class: 'note', id: 'compare-none' }, 'Choose two runs or more: tick them in the runs list and press "Compare selected".'));
    return;
  }
  // the chart library loads while the figures are read; each run's JSON at once, and its steps'
  // curves asked for as soon as it comes; a run that cannot be read is said, the rest compared
  uplot().catch(() => {}); // its error is the charts' to say
  const reads = ids.map((id) => callJSON(`/runs/${id}`, { signal }).then((run) => {
    const curves = readCurves(run, signal);
    curves.catch(() => {}); // only the view going away: awaited below, unless the page has gone already
    return { run, curves };
  }));
  const got = await Promise.allSettled(reads);
  if (signal.aborted) return;
  const runs = [], curveReads = [], missing = [];
  got.forEach((g, i) => {
    if (g.status === 'fulfilled') { runs.push(g.value.run); curveReads.push(g.value.curves); }
    else if (quiet(g.reason)) throw g.reason;
    else missing.push(`#${ids[i]} (${g.reason.message})`);
  });
  const curves = el('section', { id: 'cmp-curves', 'aria-labelledby': 'cmp-curves-h' },
    el('h2', { id: 'cmp-curves-h' }, 'Curves'), el('p', { class: 'note' }, 'Reading the training curves…'));
  setView(back, el('h1', {}, `Runs compared (${runs.length})`),
    all.length > MAX_RUNS ? el('p', { class: 'note' }, `The first ${MAX_RUNS} of the ${all.length} runs asked for.`) : null,
    missing.length ? el('p', { class: 'error', role: 'alert' }, `Not shown: ${missing.join(', ')}`) : null,
    runHeads(runs),
    el('section', { id: 'cmp-metrics', 'aria-labelledby': 'cmp-metrics-h' }, el('h2', { id: 'cmp-metrics-h' }, 'Metrics'),
      metricsTable(runs)),
    el('section', { id: 'cmp-params', 'aria-labelledby': 'cmp-params-h' }, el('h2', { id: 'cmp-params-h' }, 'Params'),
      paramsTable(runs)),
    curves);
  await showCurves(curves, await Promise.all(curveReads), signal);
}

// ---- the runs ----

function runHeads(runs) {
  return el('ol', { class: 'cmp-runs', id: 'cmp-runs' }, runs.map((r, i) => el('li', { 'data-run': r.id },
    el('a', { href: `#/runs/${r.id}`, class: 'cmp-run-id' }, `#${r.id}`), i === 0 ? el('span', { class: 'note' }, ' (baseline)') : null,
    el('span', { class: 'cmp-run-wf' }, r.workflow || ''), stateBadge(r.state),
    el('span', { class: 'note' }, timeCell(r.created_at), r.started_at ? ` · ${duration(r.started_at, r.finished_at)}` : ''))));
}

// A column header a run: its id, a link to it.
const runTh = (r) => el('th', { scope: 'col', class: 'num' }, el('a', { href: `#/runs/${r.id}` }, `#${r.id}`));

// ---- final metrics ----

// A run's final metrics, {step: {metric: value}}: the run's own merge of its steps' metrics.json
// (fan-out children included), or, where it has none, its steps'.
function finalMetrics(r) {
  if (r.metrics && typeof r.metrics === 'object') return r.metrics;
  const m = {};
  for (const s of r.steps || []) if (s.metrics && typeof s.metrics === 'object') m[s.name] = s.metrics;
  return m;
}

function metricsTable(runs) {
  const per = runs.map(finalMetrics);
  const rows = new Map(); // "step\tmetric" → [step, metric]
  for (const m of per) {
    for (const [step, ms] of Object.entries(m)) {
      if (!ms || typeof ms !== 'object') continue;
      for (const k of Object.keys(ms)) rows.set(`${step}\t${k}`, [step, k]);
    }
  }
  if (!rows.size) return el('p', { class: 'note' }, 'No final metrics: none of these runs has a step that wrote metrics.json.');
  const steps = new Set([...rows.values()].map(([s]) => s));
  const sorted = [...rows.values()].sort((a, b) => a[1].localeCompare(b[1]) || a[0].localeCompare(b[0]));
  return el('div', { class: 'table-wrap' }, el('table', { id: 'cmp-metrics-table', class: 'cmp-table' },
    el('caption', { class: 'note' }, `Each run against the first (#${runs[0].id}); ★ the best of a row, taken as the lowest for names with loss, error, latency or time in them and the highest for the rest; ≠ a row whose values differ.`),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Metric'), runs.map(runTh))),
    el('tbody', {}, sorted.map(([step, name]) => {
      const vals = per.map((m) => (m[step] && typeof m[step] === 'object' ? m[step][name] : undefined));
      return metricRow(step, name, vals, steps.size > 1);
    }))));
}

function metricRow(step, name, vals, showStep) {
  const nums = vals.filter((v) => typeof v === 'number');
  const differs = vals.some((v) => !same(v, vals[0]));
  const lower = lowerIsBetter(name);
  // the best: only where there is a choice (two numbers or more that are not all equal)
  const best = nums.length > 1 && nums.some((v) => v !== nums[0]) ? (lower ? Math.min(...nums) : Math.max(...nums)) : null;
  const base = vals[0];
  return el('tr', { 'data-metric': name, 'data-step': step, class: differs ? 'differs' : null },
    el('th', { scope: 'row' }, differs ? el('span', { class: 'sym', title: 'the values differ' }, '≠ ') : null, name,
      showStep ? el('span', { class: 'note' }, ` (${step})`) : null),
    vals.map((v, i) => {
      const isBest = best !== null && v === best;
      return el('td', { class: `num${isBest ? ' best' : ''}` },
        el('span', { class: 'cmp-val' }, fmt(v)),
        isBest ? el('span', { class: 'cmp-best', title: 'the best of this row' }, ' ★', el('span', { class: 'sr-only' }, ' best')) : null,
        i > 0 ? delta(lower, base, v) : null);
    }));
}

// A run's difference from the first: +0.012 (+3.1 %), better or worse said by a word in its title
// and an arrow, coloured besides (never colour alone).
function delta(lower, x, y) {
  if (typeof x !== 'number' || typeof y !== 'number') return null;
  const d = y - x;
  if (d === 0) return el('span', { class: 'cmp-delta cmp same' }, '=');
  const better = lower ? d < 0 : d > 0;
  const pct = x !== 0 ? ` (${d > 0 ? '+' : '−'}${fmt(Number(Math.abs((d / x) * 100).toPrecision(2)))} %)` : '';
  return el('span', { class: `cmp-delta cmp ${better ? 'better' : 'worse'}`, title: better ? 'better than the first run' : 'worse than the first run' },
    `${d > 0 ? '+' : '−'}${fmt(Math.abs(d))}${pct} `, el('span', { class: 'sym', 'aria-hidden': 'true' }, d > 0 ? '▲' : '▼'),
    el('span', { class: 'sr-only' }, better ? ' better' : ' worse'));
}

// ---- params ----

function paramsTable(runs) {
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.params || {})))].sort();
  if (!names.length) return el('p', { class: 'note' }, 'No params: none of these runs was given any.');
  return el('div', { class: 'table-wrap' }, el('table', { id: 'cmp-params-table', class: 'cmp-table' },
    el('caption', { class: 'note' }, '≠ a param whose values differ.'),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Param'), runs.map(runTh))),
    el('tbody', {}, names.map((n) => {
      const vals = runs.map((r) => (r.params || {})[n]);
      const differs = vals.some((v) => !same(v, vals[0]));
      return el('tr', { 'data-param': n, class: differs ? 'differs' : null },
        el('th', { scope: 'row' }, differs ? el('span', { class: 'sym', title: 'the values differ' }, '≠ ') : null, n),
        vals.map((v) => el('td', { class: 'num' }, el('code', {}, fmt(v)))));
    }))));
}

// ---- curves ----

// The steps of a run whose monitor is asked: those that ran a job, train steps first, CURVE_STEPS at most.
function curveSteps(r) {
  return (r.steps || []).filter((s) => CURVE_KINDS.includes(s.kind || 'run') && s.attempts > 0)
    .sort((a, b) => (a.kind === 'train' ? 0 : 1) - (b.kind === 'train' ? 0 : 1)).slice(0, CURVE_STEPS);
}

// A run's curves: its steps' monitors, at once → [{run, step, series}] (a step whose monitor cannot be
// read has none).
function readCurves(r, signal) {
  return Promise.all(curveSteps(r).map((s) => callJSON(`/runs/${r.id}/steps/${encodeURIComponent(s.name)}/monitor`, { signal })
    .then((m) => ({ run: r.id, step: s.name, series: m.series || {} }),
      (e) => { if (quiet(e)) throw e; return { run: r.id, step: s.name, series: {} }; })));
}

// One chart a metric name with a series a run and step, in the runs' order. When every chart is
// drawn the section says so (data-state="drawn"; each figure its data-series count).
async function showCurves(box, perRun, signal) {
  if (signal.aborted) return;
  const byMetric = new Map(); // metric → [{label, points}]
  for (const c of perRun.flat()) {
    for (const [k, sr] of Object.entries(c.series)) {
      const pts = (sr.points || []).map(([x, y]) => [x, typeof y === 'number' && Number.isFinite(y) ? y : null]);
      if (!pts.length) continue;
      if (!byMetric.has(k)) byMetric.set(k, []);
      byMetric.get(k).push({ label: `run ${c.run} · ${c.step}`, points: pts });
    }
  }
  const head = box.firstChild;
  if (!byMetric.size) {
    box.replaceChildren(head, el('p', { class: 'note' }, "No training curves: none of these runs' steps wrote $FERRY_METRICS_FILE."));
    box.dataset.state = 'drawn';
    return;
  }
  const log = el('input', { type: 'checkbox', id: 'cmp-log' });
  const sm = el('input', { type: 'range', id: 'cmp-smooth', min: '0', max: '0.95', step: '0.05', value: '0' });
  const smv = el('output', { for: 'cmp-smooth' }, '0');
  const grid = el('div', { class: 'curve-grid' });
  box.replaceChildren(head,
    el('p', { class: 'note' }, 'One chart a metric the runs\' steps wrote to $FERRY_METRICS_FILE, a series a run and step (its step on x; drag to zoom, double-click to zoom out).'),
    el('div', { class: 'chart-controls' }, el('label', {}, log, ' Log scale'), el('label', {}, 'Smoothing ', sm), smv), grid);
  const charts = [...byMetric.keys()].sort().map((k) => {
    const series = byMetric.get(k);
    const fig = el('figure', { class: 'chart', 'data-metric': k }, el('figcaption', {}, el('strong', {}, k),
      el('span', { class: 'note' }, ` — ${series.length} series`)), el('div', { class: 'chart-box' }));
    grid.append(fig);
    return lineChart(fig.lastChild, { series, xLabel: 'step', height: 200 }).then((h) => {
      fig.dataset.series = String(series.length);
      return h;
    }, (e) => {
      fig.lastChild.replaceChildren(el('p', { class: 'note' }, `No chart: ${e.message}`));
      return null;
    });
  });
  const handles = (await Promise.all(charts)).filter(Boolean);
  const drop = () => { for (const h of handles) h.destroy(); };
  if (signal.aborted) { drop(); return; }
  signal.addEventListener('abort', drop, { once: true });
  log.addEventListener('change', () => { for (const h of handles) h.setLog(log.checked); });
  sm.addEventListener('input', () => {
    smv.textContent = sm.value;
    for (const h of handles) h.setSmoothing(Number(sm.value));
  });
  box.dataset.state = 'drawn';
}
