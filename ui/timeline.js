// Ferry console: a run's timeline, its steps as a Gantt chart on the run
// page (runs.js), so "what took the time" is one glance. Its data is
// GET /runs/{id}/timeline (db/functions/timeline.sql): one row per step, a
// fan-out's items collapsed into its row, each attempt its own bar (a
// retried step has two), the wait before an attempt could start (lighter)
// and a person's turn (label, approval, gate) as bars of their own.
//
// Bars are placed by CSSOM (style.left and style.width in %, which the CSP
// allows; never a style attribute). A big run shows its ROWS_SHOWN longest
// steps (in file order) until "Show all" is pressed. Live: runs.js hands
// every run the stream brings to changed(); the timeline is read again only
// when a step's state, attempts or items moved (one read at a time, one
// more when something moved during it, a second apart), and open bars are drawn to the
// server's "now" carried forward by the browser's clock.

import { el, callJSON, parseTime, SYMBOLS, quiet } from './lib.js';

const ROWS_SHOWN = 200; // a bigger run shows its longest steps until asked for all
const READ_GAP_MS = 1000; // the timeline is read again at most this often while the run moves
const TICKS = 6; // at most this many ticks on the time axis
// tick spacings (ms) the axis picks from: the first that gives at most TICKS ticks
const STEPS = [1, 2, 5, 10, 15, 30].map((s) => s * 1000)
  .concat([1, 2, 5, 10, 15, 30].map((m) => m * 60000))
  .concat([1, 2, 3, 6, 12, 24, 48].map((h) => h * 3600000));
// what each kind of bar is called in its title and the legend
const KINDS = { queued: 'waiting to start', attempt: 'attempt', waiting: 'waiting for a person', items: 'items' };

// A span of milliseconds as a person reads it: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min.
export function spanText(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  return `${Math.floor(ms / 3600000)} h ${Math.round((ms % 3600000) / 60000)} min`;
}

// What moved in a run (the stream's JSON) that the timeline's bars depend on: a read is due when it changes.
function signature(run) {
  const parts = [run.state];
  for (const s of run.steps || []) parts.push(`${s.state}:${s.attempts}:${s.items ? s.items.done : ''}`);
  return parts.join('|');
}

export class Timeline {
  // runId: the run; signal: the view's; onSelect(name): a step's name pressed (the run page opens its panel).
  constructor({ runId, signal, onSelect }) {
    this.runId = runId;
    this.signal = signal;
    this.onSelect = onSelect;
    this.data = null; // the last answer of GET /timeline
    this.readAt = 0; // the browser's clock when it came (open bars grow from the server's "now" by the difference)
    this.all = false; // "Show all" pressed
    this.sig = null;
    this.busy = false;
    this.again = false;
    this.frame = 0; // a draw() asked for at the next frame
    this.summary = el('p', { class: 'note', id: 'timeline-summary' }, 'Loading the timeline…');
    this.grid = el('div', { class: 'tl-grid' });
    // kept across renders: a stream that redraws the chart many times a second never takes the button
    // from under a click (a new one each render was "detached" until a loaded CI machine's click timed out)
    this.moreText = document.createTextNode('');
    this.allButton = el('button', { type: 'button', id: 'timeline-all',
      onclick: () => { this.all = !this.all; this.render(); } });
    this.more = el('p', { class: 'note tl-more', hidden: true }, this.moreText, this.allButton);
    this.element = el('section', { class: 'timeline', id: 'timeline', 'aria-labelledby': 'timeline-h' },
      el('h2', { id: 'timeline-h' }, 'Timeline'), this.summary, legend(),
      el('div', { class: 'tl-scroll', tabindex: '0', 'aria-label': 'the timeline: scrolls sideways' }, this.grid),
      this.more);
  }

  // A run from the page (its first read or the stream): the timeline read again when what it draws moved,
  // else only drawn again (a running bar grows).
  changed(run) {
    const sig = signature(run);
    if (sig === this.sig) { this.draw(); return; }
    this.sig = sig;
    this.load();
  }

  // Drawn again at the next frame (open bars grow), however many stream messages asked before it.
  draw() {
    if (this.frame || !this.data) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.render(); });
  }

  async load() {
    if (this.busy) { this.again = true; return; }
    this.busy = true;
    try {
      do {
        this.again = false;
        // a live big run moves many times a second: read (and draw all rows) at most once per READ_GAP_MS
        const wait = this.readAt + READ_GAP_MS - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        this.data = await callJSON(`/runs/${this.runId}/timeline`, { signal: this.signal });
        this.readAt = Date.now();
        this.render();
      } while (this.again);
    } catch (e) {
      if (!quiet(e)) this.summary.textContent = `No timeline: ${e.message}`;
    } finally {
      this.busy = false;
    }
  }

  render() {
    const d = this.data;
    const now = (parseTime(d.now) || new Date()).getTime() + (Date.now() - this.readAt);
    const t0 = (parseTime(d.created_at) || new Date(now)).getTime();
    const runEnd = parseTime(d.finished_at);
    // each row's bars in ms; the chart ends at the run's end, or now, or the last bar's end
    let t1 = runEnd ? runEnd.getTime() : now;
    const rows = d.rows.map((r) => {
      const bars = r.bars.map((b) => {
        const from = parseTime(b.from).getTime();
        const to = b.to ? parseTime(b.to).getTime() : Math.max(now, from);
        return { ...b, fromMs: from, toMs: to };
      });
      for (const b of bars) t1 = Math.max(t1, b.toMs);
      const work = bars.filter((b) => b.kind !== 'queued');
      const took = work.length ? Math.max(...work.map((b) => b.toMs)) - Math.min(...work.map((b) => b.fromMs)) : 0;
      return { r, bars, took };
    });
    const total = Math.max(t1 - t0, 1);
    const pct = (t) => ((t - t0) / total) * 100;

    // a big run: its longest steps, in file order, until "Show all"
    let shown = rows;
    if (!this.all && rows.length > ROWS_SHOWN) {
      const keep = new Set([...rows].sort((a, b) => b.took - a.took).slice(0, ROWS_SHOWN));
      shown = rows.filter((x) => keep.has(x));
    }
    const longest = [...rows].filter((x) => x.took > 0).sort((a, b) => b.took - a.took).slice(0, 3);
    this.summary.replaceChildren(
      `Total ${spanText(t1 - t0)}${runEnd ? '' : ' so far'} · ${rows.length} step${rows.length === 1 ? '' : 's'}`,
      longest.length ? ` · longest: ${longest.map((x) => `${x.r.step} (${spanText(x.took)})`).join(', ')}` : '');

    this.grid.replaceChildren(axis(total), ...shown.map((x) => this.row(x, pct, t0)));
    if (rows.length > ROWS_SHOWN) {
      this.more.hidden = false;
      this.moreText.data = this.all ? `All ${rows.length} steps shown. `
        : `The ${ROWS_SHOWN} longest of ${rows.length} steps shown, in file order. `;
      this.allButton.textContent = this.all ? `Show the ${ROWS_SHOWN} longest` : `Show all ${rows.length}`;
    } else {
      this.more.hidden = true;
    }
  }

  // One step's row: its name (a button that opens its panel; a fan-out says its item count) and its bars.
  row({ r, bars }, pct, t0) {
    const it = r.items;
    const count = it ? Object.entries(it.states || {}).map(([s, n]) => `${n} ${s}`).join(', ') : '';
    const label = el('button', {
      type: 'button', class: 'tl-label step-link', title: it ? `${r.step}: ${it.total} items (${count || 'none started'})` : r.step,
      onclick: () => this.onSelect(r.step),
    }, el('span', { class: 'tl-name' }, r.step), it ? el('span', { class: 'tl-count' }, `×${it.total}`) : null);
    const track = el('div', { class: 'tl-track' });
    for (const b of bars) {
      const what = b.kind === 'attempt' ? `attempt ${b.attempt}` : KINDS[b.kind];
      const open = !b.to;
      const tip = `${r.step} · ${what} · ${b.state}${b.kind === 'items' && count ? ` (${count})` : ''}`
        + ` · from +${spanText(b.fromMs - t0)} (${new Date(b.fromMs).toLocaleTimeString()})`
        + ` · ${spanText(b.toMs - b.fromMs)}${open ? ' so far' : ''}`;
      const bar = el('span', {
        class: `tl-bar kind-${b.kind} st-${b.state}${open ? ' open' : ''}`, title: tip, 'aria-label': tip, role: 'img',
        'data-kind': b.kind, 'data-attempt': b.attempt ?? '',
      });
      bar.style.left = `${pct(b.fromMs)}%`;
      bar.style.width = `${Math.max(pct(b.toMs) - pct(b.fromMs), 0)}%`;
      track.append(bar);
    }
    if (r.attempts_left_out) track.append(el('span', { class: 'tl-left-out' }, `+${r.attempts_left_out} earlier`));
    return el('div', { class: `tl-row st-${r.state}`, 'data-step': r.step, role: 'group', 'aria-label': r.step },
      label, track);
  }
}

// The time axis: ticks at a round spacing from the run's creation, the total at the end.
function axis(total) {
  const step = STEPS.find((s) => total / s <= TICKS) || STEPS[STEPS.length - 1] * Math.ceil(total / (TICKS * STEPS[STEPS.length - 1]));
  const track = el('div', { class: 'tl-track tl-ticks', 'aria-hidden': 'true' });
  for (let t = 0; t <= total; t += step) {
    const tick = el('span', { class: 'tl-tick' }, t === 0 ? '0' : `+${spanText(t).replace(/ 0 s$| 0 min$/, '')}`);
    tick.style.left = `${(t / total) * 100}%`;
    track.append(tick);
  }
  return el('div', { class: 'tl-row tl-axis' }, el('span', { class: 'tl-label note' }, 'since created'), track);
}

// What each bar's look means: a swatch (colour and pattern) with the state's symbol and word, never colour alone.
function legend() {
  const items = [['attempt', 'running'], ['attempt', 'succeeded'], ['attempt', 'failed'], ['attempt', 'stopped'],
    ['queued', 'ready'], ['waiting', 'waiting'], ['items', 'running']];
  return el('ul', { class: 'tl-legend', 'aria-label': 'what the bars mean' }, items.map(([kind, state]) =>
    el('li', {}, el('span', { class: `tl-bar tl-swatch kind-${kind} st-${state}`, 'aria-hidden': 'true' }),
      kind === 'attempt' ? `${SYMBOLS[state]} ${state}` : kind === 'items' ? 'fan-out items' : `${SYMBOLS[state]} ${KINDS[kind]}`)));
}
