// The console's charts: uPlot (ui/package.json, pinned; built into ferryd as uPlot.iife.min.js and
// uPlot.min.css), loaded with its stylesheet on the first chart a page draws, never before. Canvas
// drawing, no inline style or script: uPlot sizes its boxes through the CSSOM, which the CSP allows.
//
// lineChart(box, opts) draws one chart in box and returns a handle to update it in place (a live
// series grows without the chart being built again): setData(series) and setLog(on).

let loading = null;

// uPlot, once: a <script src> and a <link rel=stylesheet> of the daemon's own (script-src 'self').
export function uplot() {
  if (globalThis.uPlot) return Promise.resolve(globalThis.uPlot);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const css = document.createElement('link');
      css.rel = 'stylesheet';
      css.href = 'uPlot.min.css';
      document.head.append(css);
      const s = document.createElement('script');
      s.src = 'uPlot.iife.min.js';
      s.onload = () => resolve(globalThis.uPlot);
      s.onerror = () => { loading = null; reject(new Error('the chart library did not load')); };
      document.head.append(s);
    });
  }
  return loading;
}

// The colours of the chart's parts, from style.css's custom properties (so dark mode and the
// colour-blind-safe palette there apply to canvases too).
function palette() {
  const cs = getComputedStyle(document.documentElement);
  const v = (name, dflt) => (cs.getPropertyValue(name) || '').trim() || dflt;
  return {
    axis: v('--chart-axis', '#555'), grid: v('--chart-grid', 'rgba(0,0,0,0.08)'),
    marker: v('--chart-marker', '#d55e00'), bad: v('--chart-bad', '#cc79a7'),
    series: [v('--chart-1', '#0072b2'), v('--chart-2', '#e69f00'), v('--chart-3', '#009e73'),
      v('--chart-4', '#cc79a7'), v('--chart-5', '#56b4e9'), v('--chart-6', '#d55e00')],
  };
}

// Exponential moving average of ys with weight w (0: none), TensorBoard's smoothing: nulls pass
// through and do not reset it, and the first values are debiased so the curve starts where it does.
export function smooth(ys, w) {
  if (!(w > 0)) return ys;
  let last = 0, n = 0;
  return ys.map((y) => {
    if (y === null || !Number.isFinite(y)) return y;
    last = last * w + (1 - w) * y;
    n++;
    return last / (1 - w ** n);
  });
}

// Joins series of [x, y] points (each sorted by x) on their xs: uPlot's [xs, ys1, ys2, …].
export function align(series) {
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...series.map((s) => {
    const ys = new Array(xs.length).fill(undefined);
    for (const [x, y] of s.points) ys[at.get(x)] = y;
    return ys;
  })];
}

// Draws vertical markers (watchpoints that fired, canary steps, …) and, under the plot, a tick at
// each x where a series had a value that is not a finite number (NaN or ±Inf: null in the data).
function markersPlugin(getMarkers, getBad, pal) {
  return {
    hooks: {
      draw: [(u) => {
        const { ctx } = u;
        const { top, height } = u.bbox;
        ctx.save();
        ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
        ctx.strokeStyle = pal.marker;
        for (const m of getMarkers()) {
          const x = Math.round(u.valToPos(m.x, 'x', true));
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(x, top);
          ctx.lineTo(x, top + height);
          ctx.stroke();
        }
        ctx.setLineDash([]);
        ctx.fillStyle = pal.bad;
        for (const x0 of getBad()) {
          const x = Math.round(u.valToPos(x0, 'x', true));
          ctx.fillRect(x - 2 * devicePixelRatio, top + height - 8 * devicePixelRatio, 4 * devicePixelRatio, 8 * devicePixelRatio);
        }
        ctx.restore();
      }],
    },
  };
}

// opts: {series: [{label, points: [[x, y]…]}], title, xLabel, yLabel, time (x is epoch ms), log,
// smoothing (0…0.99), markers: [{x, label}], height}. Returns {setData(series), setLog(on),
// setSmoothing(w), destroy(), points()}: what box shows can be updated without a new chart.
export async function lineChart(box, opts) {
  const uPlot = await uplot();
  const pal = palette();
  let series = opts.series, log = !!opts.log, w = opts.smoothing || 0, markers = opts.markers || [];
  const bad = () => {
    const xs = [];
    for (const s of series) for (const [x, y] of s.points) if (y === null) xs.push(x);
    return xs;
  };
  const data = () => {
    const d = align(series);
    // a log scale has no place for values ≤ 0: they are left out, not drawn at the bottom
    return [d[0], ...d.slice(1).map((ys) => smooth(ys, w).map((y) => (log && y !== null && y !== undefined && y <= 0 ? null : y)))];
  };
  const width = () => Math.max(240, Math.floor(box.getBoundingClientRect().width || 320));
  const xRange = (u, lo, hi) => {
    const xs = u.data && u.data[0];
    // a zoom (inside the data's span) is kept as asked
    if (xs && xs.length && lo !== null && hi !== null && (lo > xs[0] || hi < xs[xs.length - 1])) return [lo, hi];
    for (const m of markers) {
      if (!Number.isFinite(m.x)) continue;
      lo = lo === null ? m.x : Math.min(lo, m.x);
      hi = hi === null ? m.x : Math.max(hi, m.x);
    }
    return lo === hi ? [lo - 1, hi + 1] : [lo, hi];
  };
  const make = () => new uPlot({
    width: width(), height: opts.height || 180, title: opts.title,
    // x: the data's span widened to the markers' (a canary's step after the last closed bucket is still drawn)
    scales: { x: { time: !!opts.time, range: (u, lo, hi) => xRange(u, lo, hi) }, y: { distr: log ? 3 : 1 } },
    axes: [
      { stroke: pal.axis, grid: { stroke: pal.grid }, ticks: { stroke: pal.grid }, label: opts.xLabel },
      { stroke: pal.axis, grid: { stroke: pal.grid }, ticks: { stroke: pal.grid }, label: opts.yLabel, size: 56 },
    ],
    series: [{ label: opts.xLabel || 'x' }, ...series.map((s, i) => ({
      // points drawn where they are sparse (uPlot's own rule): a series of one bucket still shows
      label: s.label, stroke: pal.series[i % pal.series.length], width: 1.5, spanGaps: false,
    }))],
    legend: { live: false }, // the series' names; values on hover would say "--" elsewhere
    cursor: { drag: { x: true, y: false } }, // drag to zoom in, double-click to zoom out
    hooks: { setSelect: [(p) => { if (p.select.width > 0) zoomed = true; }] },
    plugins: [markersPlugin(() => markers, bad, pal)],
  }, data(), box);
  let zoomed = false; // while the reader has zoomed in, new points do not move the view
  let u = make();
  box.addEventListener('dblclick', () => { zoomed = false; });
  const onResize = () => u.setSize({ width: width(), height: opts.height || 180 });
  const ro = typeof ResizeObserver === 'function' ? new ResizeObserver(onResize) : null;
  if (ro) ro.observe(box);
  const handle = {
    setData(next, nextMarkers) {
      series = next;
      if (nextMarkers) markers = nextMarkers;
      if (next.length + 1 !== u.series.length) { u.destroy(); u = make(); return; }
      u.setData(data(), !zoomed);
    },
    setLog(on) { log = !!on; u.destroy(); u = make(); },
    setSmoothing(v) { w = v; u.setData(data(), false); u.redraw(false, true); },
    destroy() { if (ro) ro.disconnect(); u.destroy(); },
    points() { return series.reduce((n, s) => n + s.points.length, 0); },
  };
  return handle;
}
