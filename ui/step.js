// Ferry console: a step's panel on the run page. What it shows: state,
// attempts (each with its own log), the command as it ran (the resolved
// spec: params rendered), metrics and gate results, outputs, cache origin,
// what the job monitor saw (hang verdict, utilization chart, training curves
// of the metrics the job wrote, watchpoints; charts.js),
// and the log (logs.js). What it does: continue a waiting step (a label,
// gate or deploy step) with an optional JSON payload, showing a labelling
// task's details; retry the run from this step once the run is over.
//
// The panel is re-rendered on every run update from the stream; the parts
// that cost a request (spec, monitor, log) are kept and asked again only
// when what they show changed: the spec once per step, the monitor when the
// attempt or its state changes (and every 2 s while it runs: its charts grow
// in place), the log view when the attempt changes (it follows a running
// attempt by itself).

import { el, stateBadge, timeCell, duration, callJSON, quiet, FINAL } from './lib.js';
import { LogView } from './logs.js';
import { actionButton, act } from './actions.js';
import { lineChart, uplot } from './charts.js';

const CURVES_MS = 2000; // a running attempt's monitor (utilization, training curves) asked again

// A metric's value as a person reads it: 4 significant digits.
function fmt(v) {
  return typeof v === 'number' ? String(Number(v.toPrecision(4))) : String(v);
}

// A word as a shell would need it written, for showing a command.
function shellWord(w) {
  const s = String(w);
  return /^[A-Za-z0-9_./:=,+@%-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
}

export class StepPanel {
  // container: the panel's element; runId; signal: the view's; who: whoami(); out: the result region;
  // onRun(run): an action answered with the run (it moved on)
  constructor({ container, runId, signal, who, out, onRun }) {
    Object.assign(this, { container, runId, signal, who, out, onRun });
    this.name = null;
    this.attempt = null; // the attempt whose log is shown; null: the latest
    this.log = null;
    this.logKey = '';
    this.spec = null; // {name, el}
    this.monitor = null; // {key, el}
    this.payload = ''; // what the person typed in the continue box, kept across re-renders
    this.logOf = null; // a fan-out's item whose log the Log part shows ({parent, name, attempts, running}); null: the step's own
  }

  select(name) {
    if (name !== this.name) { this.attempt = null; this.payload = ''; this.logOf = null; }
    this.name = name;
  }

  // Renders the selected step of run; fresh: it was just selected (focus moves to its heading).
  render(run, fresh) {
    this.lastRun = run;
    const s = (run.steps || []).find((x) => x.name === this.name);
    if (!s) return;
    const final = FINAL.has(run.state);
    const parts = [el('h2', { id: 'detail-h', tabindex: '-1' }, `Step ${s.name} `, stateBadge(s.state))];
    parts.push(el('div', { class: 'run-head' }, el('dl', {},
      el('dt', {}, 'Kind'), el('dd', {}, s.kind || '—'),
      el('dt', {}, 'Attempts'), el('dd', {}, s.attempts ?? 0),
      el('dt', {}, 'Duration'), el('dd', {}, duration(s.started_at, s.finished_at)),
      s.needs && s.needs.length ? [el('dt', {}, 'Needs'), el('dd', {}, s.needs.join(', '))] : null,
      s.exit_code !== undefined && s.exit_code !== null ? [el('dt', {}, 'Exit code'), el('dd', {}, s.exit_code)] : null,
      s.items ? [el('dt', {}, 'Items'), el('dd', { id: 'step-items' },
        el('progress', { max: String(s.items.total), value: String(s.items.done) }),
        ` ${s.items.done} of ${s.items.total} done: ${s.items.succeeded} succeeded, ${s.items.failed} failed, ` +
        `${s.items.active} running` + (s.items.max_parallel ? ` (at most ${s.items.max_parallel} at once)` : ''))] : null,
      s.when ? [el('dt', {}, 'When'), el('dd', { id: 'step-when' }, el('code', {}, s.when))] : null,
      s.finally ? [el('dt', {}, 'Finally'), el('dd', {}, 'runs once every other step is done, whatever the outcome')] : null,
      s.reason ? [el('dt', {}, 'Reason'), el('dd', { id: 'step-reason' }, s.reason)] : null,
      s.not_before ? [el('dt', {}, 'Retry at'), el('dd', {}, timeCell(s.not_before))] : null,
      s.cached_from ? [el('dt', {}, 'Cached from'),
        el('dd', { id: 'cached-from' }, el('a', { href: `#/runs/${s.cached_from.run}` }, `run #${s.cached_from.run}`),
          ` ${s.cached_from.step}, attempt ${s.cached_from.attempt}`)] : null)));

    if (s.state === 'waiting') parts.push(this.continueForm(s));
    if (final) parts.push(this.retryFrom(s));
    parts.push(this.specPart(s));
    parts.push(this.leaderboardPart(s));
    parts.push(this.itemsPart(s));
    parts.push(this.attemptsPart(s));
    if (s.metrics && Object.keys(s.metrics).length) {
      parts.push(el('h3', {}, 'Metrics'), el('table', { id: 'metrics' }, el('tbody', {},
        Object.entries(s.metrics).map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', { class: 'num' }, v))))));
    }
    if (s.gate && s.gate.length) {
      parts.push(el('h3', {}, 'Gate'), el('ul', { id: 'gate' }, s.gate.map((g) => el('li', { class: g.passed ? 'pass' : 'fail' },
        `${g.passed ? '✓ passed' : '✗ failed'}: ${g.metric} ${g.op} ${g.threshold} (value ${g.value}${g.against ? `, against ${g.against}` : ''})`))));
    }
    if (s.outputs !== undefined && s.outputs !== null) {
      parts.push(el('h3', {}, 'Outputs'), el('pre', { id: 'outputs' }, JSON.stringify(s.outputs, null, 2)));
    }
    parts.push(this.monitorPart(s));
    const item = this.logOf && this.logOf.parent === s.name ? this.logOf : null;
    parts.push(el('h3', { id: 'log-h' }, item ? `Log of ${item.name} ` : 'Log',
      item ? el('button', { type: 'button', id: 'log-own', onclick: () => { this.logOf = null; this.attempt = null; this.render(this.lastRun, false); } },
        `Show ${s.name}'s own`) : null), this.logPart(item ? { name: item.name, attempts: item.attempts,
      attempt_list: [{ attempt: item.attempts, state: item.running ? 'running' : 'done' }] } : s));
    // a re-render (each change of the run) moves the parts it keeps (the log view, the charts) and
    // remakes the others: the field being typed in keeps the focus and its selection — moved or
    // remade, it lost them, and what was typed next went nowhere (a log search typed while the
    // run changed lost its letters)
    const had = this.container.contains(document.activeElement) ? document.activeElement : null;
    const sel = had && typeof had.selectionStart === 'number' ? [had.selectionStart, had.selectionEnd] : null;
    this.container.replaceChildren(...parts.filter(Boolean));
    if (fresh) this.container.querySelector('#detail-h').focus();
    else if (had && had !== document.activeElement) {
      // the same element, moved; or a field remade under the same id (not a heading or a button:
      // focused again at each change of the run, a screen reader would say it each time)
      const again = had.isConnected ? had : had.id && had.matches('input, textarea, select')
        ? this.container.querySelector(`#${CSS.escape(had.id)}`) : null;
      if (again) {
        again.focus({ preventScroll: true });
        try { if (sel) again.setSelectionRange(sel[0], sel[1]); } catch { /* a field without a text selection */ }
      }
    }
  }

  // A waiting step: what it waits for (a labelling task's details) and the continue box.
  continueForm(s) {
    const o = s.outputs || {};
    const task = o.dataset ? el('div', { class: 'task', id: 'label-task' },
      el('h3', {}, 'Labelling task'),
      el('p', {}, `${o.unlabelled ?? '?'} of ${o.items ?? '?'} items in ${o.dataset} have no label in ${o.labels || '?'}.`),
      o.task ? el('p', {}, 'Task: ', typeof o.task === 'string' || (o.task && o.task.url)
        ? this.safeLink(typeof o.task === 'string' ? o.task : o.task.url) : JSON.stringify(o.task)) : null,
      o.fingerprint ? el('p', { class: 'note' }, `Dataset fingerprint ${o.fingerprint}`) : null) : null;
    const box = el('textarea', { id: 'continue-data', rows: '3', spellcheck: 'false', placeholder: '{"reviewed_by": "you"}',
      'aria-describedby': 'continue-help' });
    box.value = this.payload;
    box.addEventListener('input', () => { this.payload = box.value; });
    const btn = actionButton(`Continue ${s.name}`, this.who, async () => {
      let body = {};
      if (box.value.trim()) {
        try { body = { data: JSON.parse(box.value) }; } catch (e) {
          this.out.classList.add('error');
          this.out.textContent = `✗ The payload is not JSON: ${e.message}`;
          box.focus();
          return;
        }
      }
      const r = await act({ btn, out: this.out, what: `Continue ${s.name}`, path: `/runs/${this.runId}/steps/${encodeURIComponent(s.name)}/continue`,
        body, signal: this.signal, who: this.who });
      if (r) { this.payload = ''; this.refresh(); }
    }, { id: 'continue' });
    return el('section', { class: 'waiting', 'aria-labelledby': 'waiting-h' },
      el('h3', { id: 'waiting-h' }, `‖ Waiting for a person`), task,
      el('label', { for: 'continue-data' }, 'Payload (optional JSON: becomes the step\'s output)'),
      el('p', { class: 'note', id: 'continue-help' }, 'Leave empty to continue with no payload.'), box, el('div', {}, btn));
  }

  safeLink(url) {
    return /^https?:\/\//.test(url) ? el('a', { href: url, rel: 'noopener noreferrer', target: '_blank' }, url) : url;
  }

  retryFrom(s) {
    const noCache = el('input', { type: 'checkbox', id: 'retry-no-cache' });
    const btn = actionButton(`Retry from ${s.name}`, this.who, async () => {
      const r = await act({ btn, out: this.out, what: `Retry from ${s.name}`, path: `/runs/${this.runId}/retry`,
        body: { from: s.name, ...(noCache.checked ? { no_cache: true } : {}) }, signal: this.signal, who: this.who });
      if (r) this.onRun(r);
    }, { id: 'retry-from', title: 'run this step and everything after it again' });
    return el('div', { class: 'actions' }, btn, el('label', { class: 'inline', for: 'retry-no-cache' }, noCache, ' without the cache'));
  }

  // The run after an action that answers without it (continue): read it, hand it over.
  async refresh() {
    try { this.onRun(await callJSON(`/runs/${this.runId}`, { signal: this.signal })); } catch (e) { if (!quiet(e)) throw e; }
  }

  // The resolved command, asked once per step.
  // A fan-out's items (its children), asked for when wanted, a page of 100 at a time, all or by state;
  // the page shown is asked again when the step's done count moves.
  itemsPart(s) {
    if (!s.items) return null;
    if (!this.items || this.items.name !== s.name) {
      this.items = { name: s.name, open: false, offset: 0, state: '', done: -1, el: el('div', { id: 'items' }) };
    }
    const it = this.items;
    if (!it.open) {
      it.el.replaceChildren(el('button', { type: 'button', id: 'items-show', onclick: () => { it.open = true; this.loadItems(); } },
        `Show its ${s.items.total} items`));
    } else if (it.done !== s.items.done) {
      this.loadItems();
    }
    it.done = s.items.done;
    return el('div', {}, el('h3', {}, 'Items'), it.el);
  }

  // A sweep with select: its best item and the leaderboard (the first 20 of the outputs' 1,000), each with its log.
  leaderboardPart(s) {
    const o = s.outputs || {};
    if (!o.best || !Array.isArray(o.leaderboard) || !o.leaderboard.length) return null;
    const b = o.best;
    const params = (x) => (x && typeof x === 'object' ? Object.entries(x).map(([k, v]) => `${k}=${v}`).join(', ') : String(x));
    return el('div', { id: 'leaderboard' }, el('h3', {}, 'Best item'),
      el('p', { id: 'best' }, el('strong', {}, b.name), ` ${params(b.item)}`, ' ',
        this.itemLogButton(s, { name: b.name, index: b.index, attempts: 1, state: 'succeeded' })),
      el('div', { class: 'table-wrap' }, el('table', { id: 'leaderboard-table' },
        el('caption', {}, `Leaderboard: ${o.leaderboard.length} of ${o.items ?? '?'} items ranked`),
        el('thead', {}, el('tr', {}, ['Rank', 'Item', 'Params', 'Value', ''].map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, o.leaderboard.slice(0, 20).map((x) => el('tr', { class: x.index === b.index ? 'selected' : null, 'data-item': x.index },
          el('td', { class: 'num' }, x.rank), el('td', {}, `${s.name}[${x.index}]`), el('td', {}, el('code', {}, params(x.item))),
          el('td', { class: 'num' }, x.value),
          el('td', {}, this.itemLogButton(s, { name: `${s.name}[${x.index}]`, index: x.index, attempts: 1, state: 'succeeded' }))))))));
  }

  // A button that shows item's log (its latest attempt) in the Log part.
  itemLogButton(s, item) {
    return el('button', { type: 'button', class: 'item-log', 'data-log': item.name, disabled: !item.attempts,
      onclick: async () => {
        let { attempts, state } = item;
        if (item.index !== undefined) { // from the leaderboard: its latest attempt, asked for
          try {
            const j = await callJSON(`/runs/${this.runId}/steps/${encodeURIComponent(s.name)}/items?offset=${item.index}&limit=1`, { signal: this.signal });
            if (j.items && j.items[0]) ({ attempts, state } = j.items[0]);
          } catch (e) { if (!quiet(e)) throw e; }
        }
        this.logOf = { parent: s.name, name: item.name, attempts, running: state === 'running' };
        this.attempt = null;
        this.render(this.lastRun, false);
        const h = this.container.querySelector('#log-h');
        if (h) h.scrollIntoView({ block: 'start' });
      } }, 'Log');
  }

  loadItems() {
    const it = this.items;
    const q = `offset=${it.offset}&limit=100${it.state ? `&state=${it.state}` : ''}`;
    callJSON(`/runs/${this.runId}/steps/${encodeURIComponent(it.name)}/items?${q}`, { signal: this.signal }).then((j) => {
      const pick = el('select', { id: 'items-state', 'aria-label': 'Items in state',
        onchange: (ev) => { it.state = ev.target.value; it.offset = 0; this.loadItems(); } },
        ['', 'failed', 'running', 'succeeded', 'blocked', 'ready', 'skipped', 'stopped'].map((v) =>
          el('option', { value: v, selected: v === it.state }, v || 'all')));
      const page = (d) => () => { it.offset = Math.max(0, it.offset + d); this.loadItems(); };
      it.el.replaceChildren(
        el('p', {}, pick, j.items.length ? ` items ${it.offset}–${it.offset + j.items.length - 1}` : ' none here',
          ` `, el('button', { type: 'button', disabled: it.offset === 0, onclick: page(-100) }, 'Previous 100'),
          ` `, el('button', { type: 'button', id: 'items-next', disabled: j.items.length < 100, onclick: page(100) }, 'Next 100')),
        el('div', { class: 'table-wrap' }, el('table', { id: 'items-table' },
          el('thead', {}, el('tr', {}, ['#', 'Item', 'State', 'Attempts', 'Reason', ''].map((h) => el('th', { scope: 'col' }, h)))),
          el('tbody', {}, j.items.map((x) => el('tr', { 'data-item': x.index },
            el('td', { class: 'num' }, x.index), el('td', {}, el('code', {}, typeof x.item === 'string' ? x.item : JSON.stringify(x.item))),
            el('td', {}, stateBadge(x.state)), el('td', { class: 'num' }, x.attempts), el('td', { class: 'reason' }, x.reason || ''),
            el('td', {}, this.itemLogButton({ name: it.name }, { name: `${it.name}[${x.index}]`, attempts: x.attempts, state: x.state }))))))));
    }).catch((e) => { if (!quiet(e)) it.el.replaceChildren(el('p', { class: 'error' }, `Items: ${e.message}`)); });
  }

  specPart(s) {
    if (this.spec && this.spec.name === s.name) return this.spec.el;
    const box = el('div', { id: 'spec' });
    this.spec = { name: s.name, el: box };
    callJSON(`/runs/${this.runId}/steps/${encodeURIComponent(s.name)}`, { signal: this.signal }).then((j) => {
      const sp = j.spec || {};
      const rows = [];
      if (Array.isArray(sp.command)) rows.push(el('h3', {}, 'Command'), el('pre', { id: 'command' }, sp.command.map(shellWord).join(' ')));
      const facts = [];
      for (const k of ['workdir', 'executor', 'image', 'host', 'partition']) if (typeof sp[k] === 'string') facts.push(el('dt', {}, k), el('dd', {}, sp[k]));
      if (sp.env && typeof sp.env === 'object' && Object.keys(sp.env).length) facts.push(el('dt', {}, 'env'), el('dd', {}, Object.keys(sp.env).join(', ')));
      if (facts.length) rows.push(el('div', { class: 'run-head' }, el('dl', {}, facts)));
      box.replaceChildren(...rows);
    }).catch((e) => { if (!quiet(e)) box.replaceChildren(el('p', { class: 'note' }, `No spec: ${e.message}`)); });
    return box;
  }

  attemptsPart(s) {
    const list = s.attempt_list || [];
    if (!list.length) return null;
    const shown = this.attempt || s.attempts;
    return el('div', {}, el('h3', {}, 'Attempts'), el('div', { class: 'table-wrap' }, el('table', { id: 'attempts' },
      el('thead', {}, el('tr', {}, el('th', {}, '#'), el('th', {}, 'State'), el('th', { class: 'opt' }, 'Started'),
        el('th', {}, 'Duration'), el('th', {}, 'Reason'), el('th', {}, 'Log'))),
      el('tbody', {}, list.map((a) => el('tr', { class: a.attempt === shown ? 'selected' : null, 'data-attempt': a.attempt },
        el('td', { class: 'num' }, a.attempt), el('td', {}, stateBadge(a.state)),
        el('td', { class: 'opt' }, timeCell(a.started_at)), el('td', {}, duration(a.started_at, a.finished_at)),
        // the exit code is in the reason ("exit code 3: …", "signal 9"): no column of its own, so the Log one fits
        el('td', { class: 'reason' }, a.reason || (a.exit_code ? `exit code ${a.exit_code}` : a.signal ? `signal ${a.signal}` : '')),
        el('td', { class: 'log-cell' }, a.attempt === shown ? 'shown' : el('button', { type: 'button', class: 'step-link',
          onclick: () => { this.attempt = a.attempt; this.container.dispatchEvent(new Event('rerender')); } }, `log ${a.attempt}`))))))));
  }

  // What the job monitor saw of the shown attempt: asked again when the attempt or its state changes,
  // and every CURVES_MS while it runs (the curves grow: the monitor's samples and metric series are
  // no stream's; what is asked is bounded: 512 points a series at most, the monitor's own bound).
  monitorPart(s) {
    const attempt = this.attempt || s.attempts;
    if (!attempt || s.kind === 'gate' || s.kind === 'label') return null;
    const a = (s.attempt_list || []).find((x) => x.attempt === attempt);
    const key = `${s.name}#${attempt}`;
    const astate = a ? a.state : '';
    // an attempt that ended moments ago: asked once more, for what the monitor read after the end
    const justEnded = !!a && a.state !== 'running' && !!a.finished_at && Date.now() - Date.parse(a.finished_at) < 60000;
    if (this.monitor && this.monitor.key === key) {
      // the same attempt in another state (it ended): its panel and charts stay as they are, asked
      // again at once (a new panel was empty until its answer came: the charts blinked out when the
      // job ended, and a reader between the two found no watchpoint list)
      const mon = this.monitor;
      if (mon.astate !== astate) {
        mon.astate = astate;
        clearTimeout(mon.timer);
        mon.live = astate === 'running';
        mon.more = justEnded ? 1 : 0;
        mon.load();
      }
      return mon.el;
    }
    this.stopCurves();
    const box = el('div', { id: 'monitor' });
    const mon = { key, astate, el: box, charts: new Map(), timer: 0, live: astate === 'running', more: justEnded ? 1 : 0 };
    this.monitor = mon;
    const url = `/runs/${this.runId}/steps/${encodeURIComponent(s.name)}/monitor?attempt=${attempt}`;
    uplot().catch(() => {}); // the chart library loads while the monitor is asked for, not after
    const load = () => callJSON(url, { signal: this.signal }).then((m) => {
      if (this.monitor !== mon) return;
      this.showMonitor(mon, m);
      if (this.signal.aborted) return;
      if (mon.live) mon.timer = setTimeout(load, CURVES_MS);
      else if (mon.more-- > 0) mon.timer = setTimeout(load, CURVES_MS / 2);
    }).catch((e) => { if (!quiet(e)) box.replaceChildren(); });
    mon.load = load;
    load();
    return box;
  }

  stopCurves() {
    if (!this.monitor) return;
    clearTimeout(this.monitor.timer);
    this.monitor.live = false;
    for (const c of this.monitor.charts.values()) c.then((h) => h.destroy(), () => {});
  }

  // Builds the monitor's parts once, then only feeds the charts new data.
  showMonitor(mon, m) {
    const samples = m.samples || [];
    const series = m.series || {};
    const metrics = Object.keys(series).filter((k) => (series[k].points || []).length > 0);
    if ((!m.state || m.state === 'none') && !samples.length && !metrics.length) return; // never watched
    const fired = (m.watch || []).filter((w) => w.state === 'fired' && typeof w.step === 'number');
    const util = samples.filter((x) => typeof x.util === 'number').map((x) => [x.at_ms / 1000, x.util]);
    const gpu = samples.filter((x) => typeof x.gpu_util === 'number').map((x) => [x.at_ms / 1000, x.gpu_util]);
    const utilSeries = [util.length ? { label: 'CPU %', points: util } : null, gpu.length ? { label: 'GPU %', points: gpu } : null].filter(Boolean);
    if (!mon.built) {
      mon.built = true;
      mon.state = el('p', { id: 'monitor-state' });
      mon.utilBox = el('div', { class: 'chart-box', id: 'util-chart' });
      mon.utilNote = el('figcaption', { class: 'note' });
      mon.curves = el('div', { id: 'curves', class: 'curves' });
      mon.watch = el('ul', { id: 'watch' });
      mon.evidence = el('div');
      mon.utilFig = el('figure', { class: 'chart' }, mon.utilBox, mon.utilNote);
      mon.el.replaceChildren(el('h3', {}, 'Monitor'), mon.state, mon.utilFig, mon.curves, mon.watch, mon.evidence);
    }
    mon.state.replaceChildren(el('strong', {}, `Hang detector: ${m.state || 'none'}`), m.why ? ` — ${m.why}` : '');
    mon.utilFig.hidden = !utilSeries.some((x) => x.points.length >= 2); // no samples yet: no empty box
    mon.utilNote.textContent = utilSeries.length ? `Utilization, ${samples.length} samples (drag to zoom, double-click to zoom out).` : '';
    this.feed(mon, 'util', mon.utilBox, utilSeries, { time: true, xLabel: 'time', yLabel: '%', height: 140 });
    this.showCurves(mon, series, metrics, fired);
    mon.watch.replaceChildren(...(m.watch || []).map((w) => el('li', { class: w.state === 'fired' ? 'fired' : null },
      `${w.state === 'fired' ? '✗' : '✓'} ${w.metric} ${w.rule}: ${w.state}${w.message ? ` — ${w.message}` : ''}`)));
    mon.evidence.replaceChildren(...(m.evidence ? [el('details', {}, el('summary', {}, 'Evidence collected'),
      el('pre', {}, JSON.stringify(m.evidence, null, 2)))] : []));
  }

  // The training curves: one chart a metric the job wrote to $FERRY_METRICS_FILE (its step on x),
  // a log scale and smoothing for all of them, watchpoints that fired as dashed lines, values that
  // were not finite numbers (NaN, ±Inf) as ticks under the curve.
  showCurves(mon, series, metrics, fired) {
    if (!metrics.length) { mon.curves.replaceChildren(); return; }
    if (!mon.curveControls) {
      const log = el('input', { type: 'checkbox', id: 'curves-log' });
      const sm = el('input', { type: 'range', id: 'curves-smooth', min: '0', max: '0.95', step: '0.05', value: '0' });
      const smv = el('output', { for: 'curves-smooth', id: 'curves-smooth-value' }, '0');
      // the curves' own: the utilization chart keeps its linear scale and raw samples
      const curves = () => [...mon.charts].filter(([id]) => id.startsWith('m:')).map(([, c]) => c);
      log.addEventListener('change', () => { for (const c of curves()) c.then((h) => h.setLog(log.checked)); });
      sm.addEventListener('input', () => {
        smv.textContent = sm.value;
        for (const c of curves()) c.then((h) => h.setSmoothing(Number(sm.value)));
      });
      mon.curveControls = { log, sm };
      mon.curveFigs = el('div', { class: 'curve-grid' });
      mon.curves.replaceChildren(el('h4', {}, 'Training curves'),
        el('div', { class: 'chart-controls' }, el('label', {}, log, ' Log scale'),
          el('label', {}, 'Smoothing ', sm), smv), mon.curveFigs);
    }
    for (const k of metrics) {
      const sr = series[k];
      // a value that is not a finite number comes as "NaN", "Infinity" or "-Infinity": a gap, marked
      const pts = sr.points.map(([x, y]) => [x, typeof y === 'number' && Number.isFinite(y) ? y : null]);
      const marks = fired.filter((w) => w.metric === k).map((w) => ({ x: w.step, label: w.rule }));
      const bad = pts.filter((p) => p[1] === null).length;
      const caption = `${k}: ${sr.count} value${sr.count === 1 ? '' : 's'}${sr.stride > 1 ? ` (every ${sr.stride}th drawn)` : ''}` +
        `${sr.last !== null && sr.last !== undefined ? `, last ${fmt(sr.last)} at step ${sr.last_step}` : ''}` +
        `${sr.min !== null && sr.min !== undefined ? `, min ${fmt(sr.min)}, max ${fmt(sr.max)}` : ''}` +
        `${bad ? `; ${bad} not a finite number (marked below the curve)` : ''}${marks.length ? '; dashed: a watchpoint fired' : ''}.`;
      let fig = mon.curveFigs.querySelector(`figure[data-metric="${CSS.escape(k)}"]`);
      if (!fig) {
        fig = el('figure', { class: 'chart', 'data-metric': k }, el('div', { class: 'chart-box' }), el('figcaption', { class: 'note' }));
        mon.curveFigs.append(fig);
      }
      fig.querySelector('figcaption').textContent = caption;
      fig.dataset.points = String(pts.length);
      this.feed(mon, `m:${k}`, fig.firstChild, [{ label: k, points: pts }],
        { xLabel: 'step', height: 160, log: mon.curveControls.log.checked, smoothing: Number(mon.curveControls.sm.value) }, marks);
    }
  }

  // One chart of the monitor, made on its first data and fed afterwards.
  feed(mon, id, box, series, opts, markers) {
    if (!series.length || series.every((x) => x.points.length < 2)) return;
    const have = mon.charts.get(id);
    if (have) { have.then((h) => h.setData(series, markers)); return; }
    mon.charts.set(id, lineChart(box, { ...opts, series, markers }).catch((e) => {
      box.replaceChildren(el('p', { class: 'note' }, `No chart: ${e.message}`));
      throw e;
    }));
  }

  // The log of the shown attempt: one LogView per attempt, kept while it is shown.
  logPart(s) {
    const attempt = this.attempt || s.attempts;
    if (!attempt) return el('p', { class: 'note', id: 'log-note' }, 'Not started: no log yet.');
    const a = (s.attempt_list || []).find((x) => x.attempt === attempt);
    const running = !!a && a.state === 'running';
    const key = `${s.name}#${attempt}`;
    if (this.log && this.logKey === key) {
      if (!running) this.log.ended();
      return this.log.element;
    }
    if (this.log) this.log.close();
    this.log = new LogView({ runId: this.runId, step: s.name, attempt, running, signal: this.signal });
    this.logKey = key;
    this.log.open();
    return this.log.element;
  }

  close() {
    if (this.log) this.log.close();
    this.stopCurves();
  }
}
