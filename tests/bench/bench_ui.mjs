// bench_ui's browser half (tests/bench/bench_ui.sh starts the daemon and
// the runs): the console's run page in headless Chromium, timed in the page
// itself (performance.now(), whose origin is the navigation's start, and
// Date.now() against the step's own clock for log lines). Prints one JSON
// object with the figures of its phase:
//   node bench_ui.mjs pages  → run_page_ms, run_page_cached_ms (median and
//     max over the runs of BENCH_FIRST and BENCH_SECOND; *_painted_ms: until
//     the frame after that is painted), log_line_to_screen_ms
//     (a step of BENCH_LOG_YAML printing "tick <ms since the epoch>")
//   node bench_ui.mjs detail → step_detail_ms (clicks on nodes of the DAG of
//     the finished run BENCH_DETAIL)
//   node bench_ui.mjs biglog → big_log_tail_ms (a 200 MB log's tail on
//     screen after a click, run BENCH_BIGLOG)
//   node bench_ui.mjs curves → curves_ms (a finished train step that wrote
//     BENCH_CURVES_POINTS metric lines of 2 metrics: from the click on its
//     row until both training curves are drawn, run BENCH_CURVES), and
//     bundle_bytes (every console asset a page loads, uPlot included, as
//     the daemon serves them)
//   node bench_ui.mjs compare → compare_ms (#/compare of the BENCH_COMPARE
//     runs, each a train step that wrote BENCH_COMPARE_POINTS lines of 2
//     metrics: from the navigation's start until every chart has a series
//     a run drawn and the frame after it painted)
// Each try is a fresh browser context: no HTTP cache, so dag.svg comes from
// the daemon, laid out (first runs: its X-Ferry-Dag-Cache must say miss) or
// from its cache (second runs: hit). playwright-core is the browser
// suite's (tests/browser/node_modules), resolved from there.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const { chromium } = createRequire(new URL('../browser/package.json', import.meta.url))('playwright-core');

const URL_BASE = process.env.FERRY_URL;
const TOKEN = process.env.FERRY_API_TOKEN;
const STEPS = Number(process.env.BENCH_STEPS || 2000);
const phase = process.argv[2] || 'pages';
const ids = (v) => (v || '').split(',').filter(Boolean);

const median = (xs) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
};
const max = (xs) => (xs.length ? Math.max(...xs) : null);
const round = (x) => (x === null ? null : Math.round(x));

async function api(method, path, body) {
  const res = await fetch(URL_BASE + path, {
    method, headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined, signal: AbortSignal.timeout(30000),
  });
  const json = await res.json().catch(() => null);
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(json)}`);
  return json;
}

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'], timeout: 30000 });
const errors = [];

// A page of a fresh context, signed in (the token in sessionStorage before any script runs).
async function freshPage() {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await ctx.addInitScript((t) => sessionStorage.setItem('ferry.token', t), TOKEN);
  const page = await ctx.newPage();
  page.setDefaultTimeout(60000);
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  return { ctx, page };
}

// In the page: resolves with performance.now() once the DAG holds n step
// nodes and every one has a state- class (looked at after each batch of
// DOM changes).
function dagReady(n) {
  return new Promise((resolve) => {
    const ready = () => {
      const gs = document.querySelectorAll('#dag g[id^="step-"]');
      if (gs.length !== n) return false;
      for (const g of gs) if (![...g.classList].some((c) => c.startsWith('state-'))) return false;
      return true;
    };
    if (ready()) { resolve(performance.now()); return; }
    const mo = new MutationObserver(() => {
      if (!ready()) return;
      mo.disconnect();
      resolve(performance.now());
    });
    mo.observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
  });
}

// Navigation to run id's page until its DAG is drawn with every state; the
// dag.svg cache header it got. BENCH_PROFILE=1: the page's functions that
// took the most time (self time, from Chromium's CPU profile) go to stderr.
async function runPage(id, nodes = STEPS) {
  const { ctx, page } = await freshPage();
  let cache = null, cdp = null;
  page.on('response', (r) => { if (r.url().endsWith(`/runs/${id}/dag.svg`)) cache = r.headers()['x-ferry-dag-cache']; });
  if (process.env.BENCH_PROFILE) {
    cdp = await ctx.newCDPSession(page);
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 200 });
    await cdp.send('Profiler.start');
    await browser.startTracing(page, { categories: ['devtools.timeline'] });
  }
  await page.goto(`${URL_BASE}/ui/#/runs/${id}`, { waitUntil: 'commit' });
  await page.evaluate(`window.dagReady = ${dagReady}`);
  // ms: the DAG and its states are in the DOM; painted: the frame after that is painted (style, layout, paint)
  const { ms, painted } = await page.evaluate((n) => window.dagReady(n).then((ms) => new Promise((ok) =>
    requestAnimationFrame(() => setTimeout(() => ok({ ms, painted: performance.now() }), 0)))), nodes);
  if (cdp) {
    profileReport((await cdp.send('Profiler.stop')).profile, `run ${id}`);
    traceReport(JSON.parse(String(await browser.stopTracing())), `run ${id}`);
  }
  await ctx.close();
  return { ms, painted, cache };
}

// The main thread's time by trace event (nested ones counted in their parents too).
function traceReport(trace, label) {
  const events = trace.traceEvents || trace;
  const main = events.find((e) => e.name === 'thread_name' && e.args && e.args.name === 'CrRendererMain');
  const sum = new Map();
  for (const e of events) {
    if (e.ph !== 'X' || !e.dur || (main && (e.pid !== main.pid || e.tid !== main.tid))) continue;
    sum.set(e.name, (sum.get(e.name) || 0) + e.dur / 1000);
  }
  const top = [...sum].sort((a, b) => b[1] - a[1]).slice(0, 15);
  console.error(`trace of ${label} (ms):\n${top.map(([k, v]) => `  ${v.toFixed(1)}  ${k}`).join('\n')}`);
}

function profileReport(profile, label) {
  const self = new Map(), byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const dt = profile.timeDeltas;
  profile.samples.forEach((sid, i) => {
    const f = byId.get(sid).callFrame;
    const key = `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}:${f.lineNumber + 1}`;
    self.set(key, (self.get(key) || 0) + (dt[i + 1] || 0) / 1000);
  });
  const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, 15);
  console.error(`profile of ${label} (self ms):\n${top.map(([k, v]) => `  ${v.toFixed(1)}  ${k}`).join('\n')}`);
}

async function pages() {
  const out = {};
  for (const [key, list, want] of [['run_page', ids(process.env.BENCH_FIRST), 'miss'],
    ['run_page_cached', ids(process.env.BENCH_SECOND), 'hit']]) {
    const times = [], paints = [];
    for (const id of list) {
      const { ms, painted, cache } = await runPage(id);
      if (cache !== want) throw new Error(`run ${id}: dag.svg came with X-Ferry-Dag-Cache ${cache}, expected ${want}`);
      times.push(ms);
      paints.push(painted);
    }
    out[`${key}_ms`] = round(median(times));
    out[`${key}_max_ms`] = round(max(times));
    out[`${key}_painted_ms`] = round(median(paints));
  }
  out.log_line_to_screen_ms = null;
  const log = await logLines();
  out.log_line_to_screen_ms = round(median(log));
  out.log_line_to_screen_max_ms = round(max(log));
  out.log_lines = log.length;
  return out;
}

// A running step prints "tick <its clock in ms>" every 200 ms; the page
// shows its log; each line's delay is when it first appears in #log (seen
// by a MutationObserver) minus the time printed in it. Lines already
// printed when the log was first shown are not counted (they came with the
// first read, not live). No line shown live in 8 s: none (the viewer does
// not follow the log).
async function logLines() {
  const yaml = readFileSync(process.env.BENCH_LOG_YAML, 'utf8');
  const { id } = await api('POST', '/api/v1/runs', { yaml });
  for (let i = 0; i < 100; i++) {
    const r = await api('GET', `/api/v1/runs/${id}`);
    if (r.steps[0].state === 'running') break;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  const { ctx, page } = await freshPage();
  await page.goto(`${URL_BASE}/ui/#/runs/${id}`);
  await page.click('#steps button.step-link');
  await page.waitForSelector('#log');
  await page.waitForTimeout(500); // the first read of the log lands
  const delays = await page.evaluate(() => new Promise((resolve) => {
    const seen = new Set(), delays = [];
    const scan = () => {
      const now = Date.now(), log = document.querySelector('#log');
      if (!log) return;
      for (const m of log.textContent.matchAll(/tick (\d{13})/g)) {
        if (seen.has(m[1])) continue;
        seen.add(m[1]);
        if (!first) delays.push(now - Number(m[1]));
      }
    };
    let first = true;
    scan();
    first = false;
    const mo = new MutationObserver(scan);
    mo.observe(document.querySelector('#detail'), { subtree: true, childList: true, characterData: true });
    setTimeout(() => { mo.disconnect(); resolve(delays); }, 8000);
  }));
  await ctx.close();
  await api('POST', `/api/v1/runs/${id}/stop`).catch(() => {});
  return delays;
}

// Clicks on step nodes of a finished run's DAG (different steps, each with
// an attempt): from the click until #detail-h names the step and its
// attempts table is there, and the frame after it is painted.
async function detail() {
  const id = process.env.BENCH_DETAIL;
  const { ctx, page } = await freshPage();
  await page.goto(`${URL_BASE}/ui/#/runs/${id}`, { waitUntil: 'commit' });
  await page.evaluate(dagReady, STEPS);
  const times = [];
  const layers = STEPS / 50, at = (f, i) => `s${String(Math.floor(f * (layers - 1))).padStart(2, '0')}_${String(i).padStart(2, '0')}`;
  for (const name of [at(0.5, 10), at(1, 49), at(0, 0), at(0.25, 25), at(0.75, 1), at(0.125, 33), at(0.875, 17)]) {
    const ms = await page.evaluate((step) => new Promise((resolve, reject) => {
      const g = document.querySelector(`#dag g[id="step-${step}"]`);
      if (!g) { reject(new Error(`no node for ${step}`)); return; }
      const t0 = performance.now();
      g.dispatchEvent(new MouseEvent('click', { bubbles: true }));
      const shown = () => {
        const h = document.querySelector('#detail-h');
        return h && h.textContent.includes(`Step ${step} `) && document.querySelector('#attempts tbody tr');
      };
      const done = () => requestAnimationFrame(() => setTimeout(() => resolve(performance.now() - t0), 0));
      if (shown()) { done(); return; }
      const mo = new MutationObserver(() => { if (shown()) { mo.disconnect(); done(); } });
      mo.observe(document.querySelector('#detail'), { subtree: true, childList: true, characterData: true });
    }), name);
    times.push(ms);
    await page.waitForTimeout(200);
  }
  await ctx.close();
  return { step_detail_ms: round(median(times)), step_detail_max_ms: round(max(times)) };
}

// A run whose one step fans out over BENCH_FANOUT_ITEMS items, expanded and
// running: its page until the fan-out's node is drawn with its state (one
// node with a progress bar, not a box an item), the median of three loads.
async function fanout() {
  const id = process.env.BENCH_FANOUT, times = [];
  for (let i = 0; i < 3; i++) {
    const { ms } = await runPage(id, 1);
    times.push(ms);
  }
  return { foreach_items: Number(process.env.BENCH_FANOUT_ITEMS), foreach_run_page_ms: round(median(times)),
    foreach_run_page_max_ms: round(max(times)) };
}

// A finished step whose log is BENCH_BIGLOG_BYTES long, ending in the line
// "the-very-last-line": from the click on its row in the steps table until
// that line is in #log (the page fetches the tail only), three fresh pages.
async function biglog() {
  const id = process.env.BENCH_BIGLOG, times = [];
  for (let i = 0; i < 3; i++) {
    const { ctx, page } = await freshPage();
    await page.goto(`${URL_BASE}/ui/#/runs/${id}`, { waitUntil: 'commit' });
    await page.locator('#steps tr[data-step="big"] button').waitFor({ timeout: 60000 });
    const t0 = Date.now();
    await page.click('#steps tr[data-step="big"] button');
    await page.locator('#log', { hasText: 'the-very-last-line' }).waitFor({ timeout: 60000 });
    times.push(Date.now() - t0);
    await ctx.close();
  }
  return { big_log_bytes: Number(process.env.BENCH_BIGLOG_BYTES), big_log_tail_ms: round(median(times)),
    big_log_tail_max_ms: round(max(times)) };
}

async function curves() {
  const id = process.env.BENCH_CURVES, times = [];
  let bundle = 0;
  for (let i = 0; i < 3; i++) {
    const { ctx, page } = await freshPage();
    const sizes = new Map();
    page.on('response', async (r) => {
      if (!r.url().includes('/ui/')) return;
      const b = await r.body().catch(() => null);
      if (b) sizes.set(r.url(), b.length);
    });
    await page.goto(`${URL_BASE}/ui/#/runs/${id}`, { waitUntil: 'commit' });
    await page.locator('#steps tr[data-step="train"] button').waitFor({ timeout: 60000 });
    const t0 = Date.now();
    await page.click('#steps tr[data-step="train"] button');
    await page.locator('#curves figure[data-metric="loss"] canvas').waitFor({ timeout: 60000 });
    await page.locator('#curves figure[data-metric="accuracy"] canvas').waitFor({ timeout: 60000 });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    times.push(Date.now() - t0);
    bundle = [...sizes.values()].reduce((a, b) => a + b, 0);
    if (process.env.BENCH_PROFILE) {
      // the requests after the click: when each started and how long it took (ms since the click)
      const at = await page.evaluate(() => performance.timeOrigin);
      const rs = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => [e.name, e.startTime, e.duration]));
      console.error(`bench ui: curves try ${i}: ${times[times.length - 1]} ms; after the click: ${rs
        .map(([n, st, d]) => [n.replace(/^.*\/(api\/v1|ui)\//, ''), Math.round(at + st - t0), Math.round(d)])
        .filter((x) => x[1] >= 0).map((x) => `${x[0]} @${x[1]}+${x[2]}`).join(', ')}`);
    }
    await ctx.close();
  }
  return { curves_points: Number(process.env.BENCH_CURVES_POINTS), curves_ms: round(median(times)),
    curves_max_ms: round(max(times)), bundle_bytes: bundle };
}

// In the page: resolves with performance.now() once the comparison's curves are drawn, each chart
// with n series (compare.js sets #cmp-curves's data-state and each figure's data-series).
function compareReady(n) {
  return new Promise((resolve, reject) => {
    const ready = () => {
      const box = document.querySelector('#cmp-curves[data-state="drawn"]');
      if (!box) return false;
      const figs = box.querySelectorAll('figure[data-metric]');
      if (!figs.length || [...figs].some((f) => f.dataset.series !== String(n))) {
        reject(new Error(`the charts have ${[...figs].map((f) => f.dataset.series).join(',') || 'no'} series, not ${n} each`));
      }
      return true;
    };
    if (ready()) { resolve(performance.now()); return; }
    const mo = new MutationObserver(() => {
      if (!ready()) return;
      mo.disconnect();
      resolve(performance.now());
    });
    mo.observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] });
  });
}

// The BENCH_COMPARE runs compared, three fresh pages: from the navigation until every chart is drawn
// with a series a run and painted.
async function compare() {
  const list = ids(process.env.BENCH_COMPARE), times = [];
  for (let i = 0; i < 3; i++) {
    const { ctx, page } = await freshPage();
    await page.goto(`${URL_BASE}/ui/#/compare?runs=${list.join(',')}`, { waitUntil: 'commit' });
    await page.evaluate(`window.compareReady = ${compareReady}`);
    const ms = await page.evaluate((n) => window.compareReady(n).then(() => new Promise((ok) =>
      requestAnimationFrame(() => setTimeout(() => ok(performance.now()), 0)))), list.length);
    const charts = await page.locator('#cmp-curves canvas').count();
    if (charts < 2) throw new Error(`#/compare drew ${charts} charts, expected one a metric (2)`);
    times.push(ms);
    await ctx.close();
  }
  return { compare_runs: list.length, compare_points: Number(process.env.BENCH_COMPARE_POINTS),
    compare_ms: round(median(times)), compare_max_ms: round(max(times)) };
}

let out;
try {
  out = phase === 'detail' ? await detail() : phase === 'fanout' ? await fanout()
    : phase === 'biglog' ? await biglog() : phase === 'curves' ? await curves()
    : phase === 'compare' ? await compare() : await pages();
} finally {
  await browser.close();
}
if (errors.length) {
  console.error(`bench ui: the page logged errors:\n${errors.slice(0, 10).join('\n')}`);
  process.exit(1);
}
console.log(JSON.stringify(out));
