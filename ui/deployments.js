// Ferry console: deployments. #/deployments lists them (model, state,
// versions and weights, the auto-stop deadline); #/deployments/ID shows one
// as GET /deployments/{id} gives it: each version's weight, state and
// replicas with their health, its load-test results, the canary's steps
// (from the deployment's canary-step events), what HAProxy applies, the
// events, and the auto-stop countdown, ticking in the browser from the
// deadline. Extend / Stop / Start are PATCH /deployments/{id} (body
// {"extend":"2h"} or {"action":"stop"|"start"}); the outcome, or the API's
// message (a viewer's 403 among them), goes to the result region. Live
// traffic per version (requests/s, 5xx rate, mean response time) comes from
// HAProxy's counters in GET's stats, read every few seconds, and its p50 and
// p99 over the last minute from the proxy's per-request log (GET's live,
// with how many of those requests were a canary's own); an A/B test's
// header routing (GET's match) is said above the versions. Traffic over time
// (GET /deployments/{id}/traffic: the proxy's log in 10-second buckets, an
// hour of them) as charts of requests/s, 5xx rate and p50/p99 per version,
// the canary's steps and rollbacks as dashed lines, fed at each read; each
// replica's health over the hour (the same answer's "replicas") as a strip.

import { el, stateBadge, timeCell, parseTime, callJSON, setView, viewSignal, quiet, emptyState } from './lib.js';
import { whoami, resultRegion, roleNote, actionButton, act } from './actions.js';
import { lineChart } from './charts.js';

const EXTEND_HOURS = [1, 2, 4, 8, 24]; // what PATCH extend takes: whole hours 1-24, or "never"
const LIVE_MS = 3000; // how often the live traffic figures are read

// A deployment's state as symbol and word: running/stopped are run-like states.
function depState(s) { return stateBadge(s === 'stopped' ? 'stopped' : s === 'running' ? 'running' : s); }

// Seconds → "1 h 02 min 05 s".
export function countdown(ms) {
  if (ms <= 0) return 'due now';
  const s = Math.floor(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return `${h ? `${h} h ` : ''}${h || m ? `${String(m).padStart(h ? 2 : 1, '0')} min ` : ''}${String(r).padStart(h || m ? 2 : 1, '0')} s`;
}

function weights(d) {
  return (d.versions || []).filter((v) => v.state !== 'retired').map((v) => `${v.version} ${v.weight}%`).join(', ') || '—';
}

// ---- the list ----

export async function deploymentsPage() {
  const signal = viewSignal();
  const list = await callJSON('/deployments', { signal });
  setView(el('h1', {}, 'Deployments'),
    list.length ? el('div', { class: 'table-wrap' }, el('table', { id: 'deployments' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Deployment'), el('th', { scope: 'col' }, 'Model'),
        el('th', { scope: 'col' }, 'State'), el('th', { scope: 'col' }, 'Traffic'),
        el('th', { scope: 'col', class: 'opt' }, 'Auto-stop'), el('th', { scope: 'col', class: 'opt' }, 'Created'))),
      el('tbody', {}, list.map((d) => el('tr', { 'data-deployment': d.id },
        el('td', {}, el('a', { href: `#/deployments/${d.id}` }, d.name)),
        el('td', {}, d.model),
        el('td', {}, depState(d.state)),
        el('td', { class: 'num' }, weights(d)),
        el('td', { class: 'opt' }, d.deadline && d.state === 'running' ? timeCell(d.deadline) : 'never'),
        el('td', { class: 'opt' }, timeCell(d.created_at)))))))
      : emptyState('No deployments yet. A workflow step of kind deploy makes one: `kind: deploy` with `model: NAME` and `serve: [COMMAND…]`, after the register step of that model.', 'deployments-empty'));
}

// ---- one deployment ----

export async function deploymentPage(id) {
  const signal = viewSignal();
  // deployments are a deployer's to change: the buttons act for a deployer or an admin only
  const me = await whoami();
  const who = { ...me, can_act: me.can_deploy ?? me.can_admin };
  let d = await callJSON(`/deployments/${id}`, { signal });
  const head = el('div', { class: 'run-head' });
  const timer = el('p', { id: 'auto-stop', class: 'timer' });
  const out = resultRegion();
  const acts = el('div', { class: 'actions', id: 'dep-actions' });
  const body = el('div');
  setView(el('p', {}, el('a', { href: '#/deployments' }, '← Deployments')), head, timer, acts, roleNote(who), out, body);

  // the countdown: re-drawn each second from the deadline, stopped when the view goes
  const tick = setInterval(drawTimer, 1000);
  signal.addEventListener('abort', () => clearInterval(tick), { once: true });

  function drawTimer() {
    const dl = parseTime(d.deadline);
    if (d.state !== 'running') { timer.replaceChildren('Auto-stop: stopped, nothing to count down.'); return; }
    if (!dl) { timer.replaceChildren('Auto-stop: never (runs until stopped).'); return; }
    timer.replaceChildren('Auto-stop in ', el('strong', { id: 'countdown' }, countdown(dl - Date.now())), ' (at ', timeCell(d.deadline), ')');
  }

  function render() {
    head.replaceChildren(el('h1', {}, `Deployment ${d.name} `, depState(d.state)),
      el('dl', {},
        el('dt', {}, 'Model'), el('dd', {}, el('a', { href: `#/models/${encodeURIComponent(d.model)}` }, d.model)),
        el('dt', {}, 'Front'), el('dd', {}, el('code', {}, d.url || `port ${d.port}`)),
        el('dt', {}, 'Traffic'), el('dd', { id: 'traffic' }, weights(d)),
        d.run_id ? [el('dt', {}, 'Deployed by run'), el('dd', {}, el('a', { href: `#/runs/${d.run_id}` }, `#${d.run_id}`))] : null,
        el('dt', {}, 'Created'), el('dd', {}, timeCell(d.created_at))));
    drawTimer();
    renderActions();
    // sections with nothing to show are null: left out, not written as text
    body.replaceChildren(...[el('h2', {}, 'Versions'), abNote(d), versionsTable(d), liveBox, trafficBox, healthBox, loadTests(d), canary(d), haproxy(d), events(d)]
      .filter(Boolean));
    drawLive();
  }

  // Live traffic from HAProxy's counters (GET's stats: counters since HAProxy started, and its mean
  // times): read again every LIVE_MS while the page is open — no stream carries them — and
  // requests/s and the error rate are the difference between two reads over the time between them.
  const liveBox = el('section', { id: 'live-traffic', 'aria-labelledby': 'live-h' });
  let prev = null;
  function drawLive() {
    const st = d.stats && d.stats.versions ? d.stats : null;
    const lv = d.live && Object.keys(d.live).some((k) => k !== 'window_s') ? d.live : null;
    const rows = (d.versions || []).filter((v) => v.state !== 'retired').map((v) => {
      const now = st && st.versions[v.version], was = prev && prev.versions[v.version];
      const dt = prev && st ? (st.at_ms - prev.at_ms) / 1000 : 0;
      const dreq = now && was ? now.requests - was.requests : null, derr = now && was ? now.errors_5xx - was.errors_5xx : null;
      return el('tr', { 'data-version': v.version }, el('th', { scope: 'row', class: 'num' }, v.version),
        el('td', { class: 'num rps' }, dreq !== null && dt > 0 && dreq >= 0 ? (dreq / dt).toFixed(1) : '—'),
        el('td', { class: 'num err' }, dreq > 0 && derr >= 0 ? pct(derr / dreq) : '—'),
        el('td', { class: 'num rtime' }, now && now.requests ? ms(now.rtime_ms) : '—'),
        el('td', { class: 'num p50' }, lv && lv[v.version] ? ms(lv[v.version].p50_ms) : '—'),
        el('td', { class: 'num p99' }, lv && lv[v.version] ? ms(lv[v.version].p99_ms) : '—'),
        el('td', { class: 'num ours opt' }, lv && lv[v.version] && lv[v.version].synthetic ? `${lv[v.version].synthetic} of ${lv[v.version].requests}` : ''),
        el('td', { class: 'num total opt' }, now ? `${now.requests} (${now.errors_5xx} 5xx)` : '—'));
    });
    liveBox.replaceChildren(el('h2', { id: 'live-h' }, 'Live traffic'),
      st ? el('div', { class: 'table-wrap' }, el('table', { id: 'live' },
        el('thead', {}, el('tr', {}, ['Version', 'Requests/s', 'Error rate (5xx)', 'Mean response', 'p50 (1 min)', 'p99 (1 min)', 'A canary\'s own', 'Since HAProxy started'].map((h, i) =>
          el('th', { scope: 'col', class: i >= 6 ? 'opt' : null }, h)))), el('tbody', {}, rows)))
        : el('p', { class: 'note' }, 'HAProxy does not answer: no live figures.'),
      el('p', { class: 'note' }, `Rates over the last ${LIVE_MS / 1000} s, read every ${LIVE_MS / 1000} s; p50 and p99 of the requests through the proxy in the last minute (its per-request log, on the daemon that runs HAProxy; — without requests).`));
  }
  async function readLive() {
    try {
      const next = await callJSON(`/deployments/${id}`, { signal });
      prev = d.stats && d.stats.versions ? d.stats : null;
      // a version added, its weight moved (a canary's step) or the state changed: the whole page again
      const moved = JSON.stringify([next.state, next.versions]) !== JSON.stringify([d.state, d.versions]);
      d = moved ? next : { ...d, stats: next.stats, live: next.live, events: next.events };
      if (moved) render(); else drawLive();
      await readTraffic();
    } catch (e) {
      if (!quiet(e)) liveBox.append(el('p', { class: 'error' }, `Reading the counters: ${e.message}`));
    }
  }

  // Traffic over time: the buckets kept here (version → t → [t, requests, 5xx, synthetic, p50, p99]),
  // asked for from the newest one seen (a closed bucket never changes), the hour's kept.
  const trafficBox = el('section', { id: 'traffic-over-time', 'aria-labelledby': 'traffic-h' });
  const buckets = new Map();
  const charts = new Map();
  let since = 0, bucketS = 10;
  async function readTraffic() {
    const t = await callJSON(`/deployments/${id}/traffic${since ? `?since=${since}` : ''}`, { signal });
    bucketS = t.bucket_s;
    drawHealth(t.replicas || [], t.now);
    for (const [v, rows] of Object.entries(t.versions || {})) {
      const m = buckets.get(v) || new Map();
      for (const r of rows) { m.set(r[0], r); since = Math.max(since, r[0] + bucketS); }
      for (const k of m.keys()) if (k < t.now - 3600) m.delete(k);
      buckets.set(v, m);
    }
    drawTraffic();
  }
  function drawTraffic() {
    const vs = [...buckets.keys()].filter((v) => buckets.get(v).size > 0).sort();
    if (!vs.length) {
      trafficBox.replaceChildren(el('h2', { id: 'traffic-h' }, 'Traffic over time'),
        el('p', { class: 'note' }, 'No requests through the proxy in the last hour (its log is read on the daemon that runs HAProxy).'));
      charts.clear();
      return;
    }
    const rows = (v) => [...buckets.get(v).values()].sort((a, b) => a[0] - b[0]);
    // the canary's steps and rollbacks (its own and a person's), and promotions, as dashed lines where they happened
    const marks = (d.events || []).filter((e) => /^canary-|^rollback$|^promote$/.test(e.kind))
      .map((e) => ({ x: parseTime(e.at) / 1000, label: e.kind })).filter((m) => Number.isFinite(m.x));
    const figs = [
      ['rps', 'Requests/s', 'req/s', vs.map((v) => ({ label: v, points: rows(v).map((r) => [r[0], r[1] / bucketS]) }))],
      ['errors', '5xx rate', '%', vs.map((v) => ({ label: v, points: rows(v).map((r) => [r[0], (100 * r[2]) / r[1]]) }))],
      ['latency', 'Response time (p50, p99)', 'ms', vs.flatMap((v) => [
        { label: `${v} p50`, points: rows(v).map((r) => [r[0], r[4]]) },
        { label: `${v} p99`, points: rows(v).map((r) => [r[0], r[5]]) }])],
    ];
    if (!charts.size) {
      trafficBox.replaceChildren(el('h2', { id: 'traffic-h' }, 'Traffic over time'),
        el('div', { class: 'curve-grid' }, figs.map(([key, title]) => el('figure', { class: 'chart', 'data-chart': key },
          el('div', { class: 'chart-box' }), el('figcaption', { class: 'note' }, title)))),
        el('p', { class: 'note' }, `Per version, in ${bucketS}-second buckets over the last hour (the proxy's log, kept by the daemon that runs HAProxy); dashed: the canary's steps and rollbacks. Drag to zoom, double-click to zoom out.`));
    }
    for (const [key, , unit, series] of figs) {
      const fig = trafficBox.querySelector(`figure[data-chart="${key}"]`);
      fig.dataset.points = String(series.reduce((n, x) => n + x.points.length, 0));
      fig.dataset.markers = String(marks.length);
      const have = charts.get(key);
      if (have) { have.then((h) => h.setData(series, marks)); continue; }
      charts.set(key, lineChart(fig.firstChild, { series, markers: marks, time: true, xLabel: 'time', yLabel: unit, height: 150 }));
    }
  }
  // Each replica's health over the last hour (the traffic answer's "replicas", from the deployment's
  // events): a strip a replica, a bar a health, placed by CSSOM like the run's timeline.
  const healthBox = el('section', { id: 'replica-health', 'aria-labelledby': 'rh-h' });
  function drawHealth(reps, now) {
    // the last hour, or since the deployment was made when that is later (a new one is not a sliver)
    const made = (parseTime(d.created_at) || new Date(0)).getTime() / 1000;
    const t1 = now, t0 = Math.min(Math.max(now - 3600, made - 5), now - 60), span = t1 - t0;
    const pct = (t) => `${(100 * (Math.min(Math.max(t, t0), t1) - t0)) / span}%`;
    const rows = reps.map((r) => {
      const spans = [];
      if (r.before) spans.push([t0, r.before]);
      for (const c of r.changes) spans.push(c);
      const bars = spans.map(([from, h], i) => {
        const to = i + 1 < spans.length ? spans[i + 1][0] : t1;
        const [sym] = HEALTH[h] || ['?'];
        const bar = el('span', { class: `rh-bar h-${h}`, title: `${sym} ${h} from ${clock(from)} to ${i + 1 < spans.length ? clock(to) : 'now'}` });
        bar.style.left = pct(from);
        bar.style.width = `calc(${pct(to)} - ${pct(from)})`;
        return bar;
      });
      return el('div', { class: 'rh-row', 'data-version': r.version, 'data-replica': r.replica },
        // its health now as a symbol (the word in its title and for screen readers: the label column is narrow)
        el('span', { class: 'rh-label' }, `${r.version} #${r.replica} `, r.health
          ? el('span', { class: `state state-${(HEALTH[r.health] || ['?', 'lost'])[1]}`, title: `now ${r.health}`, 'aria-label': `now ${r.health}` },
            (HEALTH[r.health] || ['?'])[0])
          : el('span', { class: 'note' }, 'gone')),
        el('div', { class: 'rh-track' }, bars));
    });
    healthBox.replaceChildren(el('h2', { id: 'rh-h' }, "Replicas' health over time"),
      ...(rows.length ? [
        el('ul', { class: 'rh-legend', 'aria-label': 'legend' }, Object.entries(HEALTH).map(([h, [sym]]) =>
          el('li', {}, el('span', { class: `rh-bar rh-swatch h-${h}`, 'aria-hidden': 'true' }), `${sym} ${h}`))),
        el('div', { class: 'rh-grid' }, rows,
          el('div', { class: 'rh-row rh-axis', 'aria-hidden': 'true' }, el('span'), el('div', { class: 'rh-track' },
            el('span', { class: 'rh-tick rh-start' }, t0 <= now - 3600 ? '1 h ago' : clock(t0)), el('span', { class: 'rh-tick rh-end' }, 'now')))),
        el('p', { class: 'note' }, "The last hour (or since the deployment was made), from its events: a bar a health, from each start, health check that changed it, restart or stop (hover for the times).")]
        : [el('p', { class: 'note' }, 'No replicas in the last hour.')]));
  }
  const clock = (s) => new Date(s * 1000).toLocaleTimeString();

  readTraffic().catch((e) => { if (!quiet(e)) trafficBox.replaceChildren(el('p', { class: 'error' }, `Reading the traffic: ${e.message}`)); });
  const live = setInterval(readLive, LIVE_MS);
  signal.addEventListener('abort', () => clearInterval(live), { once: true });

  function renderActions() {
    const running = d.state === 'running';
    const hours = el('select', { id: 'extend-hours', name: 'extend', disabled: !running },
      [...EXTEND_HOURS.map((h) => el('option', { value: `${h}h` }, `${h} h`)), el('option', { value: 'never' }, 'never (no auto-stop)')]);
    const patch = (btn, what, payload) => async () => {
      const r = await act({ btn, out, what, path: `/deployments/${id}`, method: 'PATCH', body: payload, signal, who });
      if (r) { d = r; render(); }
    };
    const extend = actionButton('+ Extend', who, null, { id: 'extend', hidden: !running, title: 'move the auto-stop deadline later' });
    extend.addEventListener('click', () => patch(extend, hours.value === 'never' ? `Keep deployment ${d.name} running (no auto-stop)`
      : `Extend deployment ${d.name} by ${hours.value}`, { extend: hours.value })());
    const stop = actionButton('■ Stop', who, null, { id: 'dep-stop', hidden: !running });
    stop.addEventListener('click', patch(stop, `Stop deployment ${d.name}`, { action: 'stop' }));
    const start = actionButton('▶ Start', who, null, { id: 'dep-start', hidden: running });
    start.addEventListener('click', patch(start, `Start deployment ${d.name}`, { action: 'start' }));
    // no stream carries a deployment's changes (replica health moves on its own): read again on request
    const refresh = el('button', { type: 'button', id: 'dep-refresh', onclick: async () => {
      refresh.disabled = true;
      try { d = await callJSON(`/deployments/${id}`, { signal }); render(); } catch (e) {
        if (!quiet(e)) { out.classList.add('error'); out.textContent = `✗ Refresh: ${e.message}`; }
      } finally { refresh.disabled = false; }
    } }, '↻ Refresh');
    acts.replaceChildren(...[running ? el('label', { for: 'extend-hours', class: 'inline' }, 'Extend by') : null,
      running ? hours : null, extend, stop, start, refresh].filter(Boolean));
  }

  render();
}

// A replica's health (deployment_replicas' CHECK) as symbol and word, coloured as the run states are.
const HEALTH = { healthy: ['✓', 'succeeded'], starting: ['…', 'pending'], unhealthy: ['✗', 'failed'], stopped: ['■', 'stopped'] };
function healthBadge(h) {
  const [sym, cls] = HEALTH[h] || ['?', 'lost'];
  return el('span', { class: `state state-${cls}` }, el('span', { class: 'sym', 'aria-hidden': 'true' }, sym), h || 'unknown');
}

function replicas(v) {
  const rs = v.replica_list || [];
  if (!rs.length) return '—';
  const healthy = rs.filter((r) => r.health === 'healthy').length;
  return el('div', {}, el('span', {}, `${healthy} of ${rs.length} healthy`),
    el('ul', { class: 'replicas' }, rs.map((r) => el('li', { 'data-replica': r.idx },
      `#${r.idx} `, healthBadge(r.health),
      // where it runs in a fleet (its handle names the host; a placed one is not started there yet)
      ` · port ${r.port}${r.handle && r.handle.host ? ` on ${r.handle.host}${r.handle.placed ? ' (placed, starting)' : ''}` : ''}`,
      r.restarts ? ` · ${r.restarts} restarts` : '',
      // the last error beside a replica that is not healthy; a healthy one's is history, said as such
      r.last_error && r.health !== 'healthy' ? el('span', { class: 'error' }, ` · ${r.last_error}`)
        : r.last_error && r.restarts ? el('span', { class: 'note' }, ` · before its last restart: ${r.last_error}`) : null))));
}

function versionsTable(d) {
  return el('div', { class: 'table-wrap' }, el('table', { id: 'dep-versions' },
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Version'), el('th', { scope: 'col' }, 'State'),
      el('th', { scope: 'col' }, 'Weight'), el('th', { scope: 'col' }, 'Replicas'),
      el('th', { scope: 'col', class: 'opt' }, 'Run'))),
    el('tbody', {}, (d.versions || []).map((v) => el('tr', { 'data-version': v.version },
      el('th', { scope: 'row', class: 'num' }, v.version),
      el('td', {}, v.state),
      el('td', { class: 'num weight' }, `${v.weight}%`),
      el('td', {}, replicas(v)),
      el('td', { class: 'opt' }, v.run_id ? el('a', { href: `#/runs/${v.run_id}` }, `#${v.run_id}${v.step ? ` ${v.step}` : ''}`) : '—'))))));
}

// An A/B test's header routing while one runs (GET's match), or nothing.
function abNote(d) {
  const m = d.match;
  if (!m) return null;
  return el('p', { id: 'ab-match', class: 'note' }, `A/B test: requests with the header ${m.header}`,
    m.value ? `: ${m.value}` : ' (any value)', ` go to ${m.version} alone; the others by the weights below.`);
}

const ms = (x) => (typeof x === 'number' ? `${Number(x.toPrecision(4))} ms` : '—');
const pct = (x) => (typeof x === 'number' ? `${Number((100 * x).toPrecision(3))}%` : '—');

// Each version's load test: its levels (concurrency → p50/p99/error rate) and its thresholds.
function loadTests(d) {
  const withLt = (d.versions || []).filter((v) => v.load_test);
  if (!withLt.length) return null;
  return el('section', { id: 'load-tests' }, el('h2', {}, 'Load tests'), withLt.map((v) => {
    const lt = v.load_test, checks = lt.verdicts || [];
    return el('div', { 'data-version': v.version }, el('h3', {}, `${v.version}`,
      lt.started_at ? el('span', { class: 'note' }, ' at ', timeCell(lt.started_at)) : null),
    el('div', { class: 'table-wrap' }, el('table', { class: 'load-levels' },
      el('thead', {}, el('tr', {}, ['Concurrency', 'Requests', 'Req/s', 'p50', 'p99', 'Error rate'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, (lt.levels || []).map((l) => el('tr', {},
        el('td', { class: 'num' }, l.concurrency), el('td', { class: 'num' }, l.requests),
        el('td', { class: 'num' }, typeof l.throughput_rps === 'number' ? l.throughput_rps.toFixed(1) : '—'),
        el('td', { class: 'num' }, ms(l.p50_ms)), el('td', { class: 'num' }, ms(l.p99_ms)),
        el('td', { class: 'num' }, pct(l.error_rate))))))),
    Array.isArray(checks) && checks.length ? el('ul', {}, checks.map((c) => el('li', {},
      stateBadge(c.passed ? 'succeeded' : 'failed'),
      ` ${c.metric} ${c.op || ''} ${c.threshold ?? ''}${c.value !== undefined && c.value !== null ? ` (measured ${Number(Number(c.value).toPrecision(4))}${c.level ? ` at ${c.level}` : ''})` : ''}`))) : null);
  }));
}

// The canary's progress: its steps as the canary-step and canary-rolled-back events record them.
function canary(d) {
  const evs = (d.events || []).filter((e) => e.kind.startsWith('canary'));
  if (!evs.length) return null;
  return el('section', { id: 'canary' }, el('h2', {}, 'Canary'), el('ol', {}, evs.map((e) => {
    const x = e.detail || {};
    if (e.kind === 'canary-step') {
      return el('li', {}, `${x.version}: ${x.traffic}% of traffic, ${x.requests} requests, ${pct(x.error_rate)} errors`,
        ` (the others ${pct(x.baseline_error_rate)} of ${x.baseline_requests}), mean ${ms(x.rtime_ms)} `, timeCell(e.at));
    }
    return el('li', {}, stateBadge('failed'), ` ${e.kind}: ${x.reason || JSON.stringify(x)} `, timeCell(e.at));
  })));
}

function haproxy(d) {
  const hs = d.haproxy || [];
  if (!hs.length) return null;
  return el('details', { id: 'haproxy' }, el('summary', {}, `What HAProxy applies (${hs.length} servers)`),
    el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, ['Server', 'Address', 'Weight', 'State'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, hs.map((s) => el('tr', {}, el('td', {}, s.server), el('td', {}, s.addr),
        el('td', { class: 'num' }, s.weight), el('td', {}, s.state)))))));
}

function events(d) {
  const evs = d.events || [];
  if (!evs.length) return null;
  return el('details', { id: 'dep-events' }, el('summary', {}, `Events (${evs.length}, who did what)`),
    el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, ['At', 'Actor', 'Event', 'Detail'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, evs.slice().reverse().map((e) => el('tr', { 'data-kind': e.kind }, el('td', {}, timeCell(e.at)),
        el('td', {}, e.actor || ''), el('td', {}, e.kind),
        el('td', { class: 'detail-json' }, e.detail ? JSON.stringify(e.detail) : '')))))));
}
