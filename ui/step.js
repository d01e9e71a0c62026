// Ferry console: a step's panel on the run page. What it shows: state,
// attempts (each with its own log), the command as it ran (the resolved
// spec: params rendered), metrics and gate results, outputs, cache origin,
// what the job monitor saw (hang verdict, utilization chart, watchpoints),
// and the log (logs.js). What it does: continue a waiting step (a label,
// gate or deploy step) with an optional JSON payload, showing a labelling
// task's details; retry the run from this step once the run is over.
//
// The panel is re-rendered on every run update from the stream; the parts
// that cost a request (spec, monitor, log) are kept and asked again only
// when what they show changed: the spec once per step, the monitor when the
// attempt or its state changes, the log view when the attempt changes (it
// follows a running attempt by itself).

import { el, stateBadge, timeCell, duration, callJSON, quiet, FINAL } from './lib.js';
import { LogView } from './logs.js';
import { actionButton, act } from './actions.js';

// A word as a shell would need it written, for showing a command.
function shellWord(w) {
  const s = String(w);
  return /^[A-Za-z0-9_./:=,+@%-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
}

// A small line chart (SVG, no style attributes: classes only) of series [[x, y]…] on one scale.
function chart(series, label) {
  const W = 320, H = 80, P = 4;
  const pts = series.flatMap((s) => s.points);
  if (pts.length < 2) return null;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y1 = Math.max(1, ...ys);
  const sx = (x) => P + ((x - x0) / Math.max(1, x1 - x0)) * (W - 2 * P);
  const sy = (y) => H - P - (y / y1) * (H - 2 * P);
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  for (const s of series) {
    if (s.points.length < 2) continue;
    const line = document.createElementNS(NS, 'polyline');
    line.setAttribute('points', s.points.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' '));
    line.setAttribute('class', `series ${s.cls}`);
    svg.append(line);
  }
  const top = document.createElementNS(NS, 'text');
  top.setAttribute('x', String(W - P));
  top.setAttribute('y', '12');
  top.setAttribute('text-anchor', 'end');
  top.textContent = String(Math.round(y1 * 10) / 10);
  svg.append(top);
  return svg;
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
    this.container.replaceChildren(...parts.filter(Boolean));
    if (fresh) this.container.querySelector('#detail-h').focus();
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
      el('thead', {}, el('tr', {}, el('th', {}, '#'), el('th', {}, 'State'), el('th', {}, 'Started'),
        el('th', {}, 'Duration'), el('th', {}, 'Reason'), el('th', {}, 'Log'))),
      el('tbody', {}, list.map((a) => el('tr', { class: a.attempt === shown ? 'selected' : null, 'data-attempt': a.attempt },
        el('td', { class: 'num' }, a.attempt), el('td', {}, stateBadge(a.state)),
        el('td', {}, timeCell(a.started_at)), el('td', {}, duration(a.started_at, a.finished_at)),
        // the exit code is in the reason ("exit code 3: …", "signal 9"): no column of its own, so the Log one fits
        el('td', { class: 'reason' }, a.reason || (a.exit_code ? `exit code ${a.exit_code}` : a.signal ? `signal ${a.signal}` : '')),
        el('td', { class: 'log-cell' }, a.attempt === shown ? 'shown' : el('button', { type: 'button', class: 'step-link',
          onclick: () => { this.attempt = a.attempt; this.container.dispatchEvent(new Event('rerender')); } }, `log ${a.attempt}`))))))));
  }

  // What the job monitor saw of the shown attempt: asked again when the attempt or its state changes.
  monitorPart(s) {
    const attempt = this.attempt || s.attempts;
    if (!attempt || s.kind === 'gate' || s.kind === 'label') return null;
    const a = (s.attempt_list || []).find((x) => x.attempt === attempt);
    const key = `${s.name}#${attempt}#${a ? a.state : ''}`;
    if (this.monitor && this.monitor.key === key) return this.monitor.el;
    const box = el('div', { id: 'monitor' });
    this.monitor = { key, el: box };
    callJSON(`/runs/${this.runId}/steps/${encodeURIComponent(s.name)}/monitor?attempt=${attempt}`, { signal: this.signal }).then((m) => {
      const samples = m.samples || [];
      if ((!m.state || m.state === 'none') && !samples.length) return; // never watched: nothing to show
      const util = samples.filter((x) => typeof x.util === 'number').map((x) => [x.at_ms, x.util]);
      const gpu = samples.filter((x) => typeof x.gpu_util === 'number').map((x) => [x.at_ms, x.gpu_util]);
      const c = chart([{ points: util, cls: 'cpu' }, { points: gpu, cls: 'gpu' }], 'utilization over time');
      box.replaceChildren(...[el('h3', {}, 'Monitor'),
        el('p', { id: 'monitor-state' }, el('strong', {}, `Hang detector: ${m.state}`), m.why ? ` — ${m.why}` : ''),
        c ? el('figure', {}, c, el('figcaption', { class: 'note' },
          `Utilization, ${samples.length} samples: ${util.length ? 'CPU (solid)' : ''}${gpu.length ? `${util.length ? ', ' : ''}GPU (dashed)` : ''}.`)) : null,
        (m.watch || []).length ? el('ul', { id: 'watch' }, m.watch.map((w) => el('li', {},
          `${w.state === 'fired' ? '✗' : '✓'} ${w.metric} ${w.rule}: ${w.state}${w.message ? ` — ${w.message}` : ''}`))) : null,
        m.evidence ? el('details', {}, el('summary', {}, 'Evidence collected'), el('pre', {}, JSON.stringify(m.evidence, null, 2))) : null]
        .filter(Boolean));
    }).catch((e) => { if (!quiet(e)) box.replaceChildren(); });
    return box;
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

  close() { if (this.log) this.log.close(); }
}
