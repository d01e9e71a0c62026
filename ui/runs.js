// Ferry console: the runs list (#/runs, filtered by state, workflow and
// trigger, newest first, paged by cursor) and a run (#/runs/ID): its DAG
// from dag.svg (laid out by Graphviz on the server, cached per workflow
// version), step states applied by class as the run's SSE stream brings
// them, a step's panel beside it (step.js), the run's actions (stop, retry),
// its timeline (timeline.js: the steps as a Gantt chart, drawn again as the
// stream brings the run) and its audit trail (events, with who did what).

import {
  el, stateBadge, timeCell, duration, call, callJSON, setView, showError, viewSignal, quiet, readSSE,
  SYMBOLS, RUN_STATES, FINAL, Unauthorized,
} from './lib.js';
import { whoami, resultRegion, roleNote, actionButton, act } from './actions.js';
import { StepPanel } from './step.js';
import { Timeline } from './timeline.js';

const TRIGGERS = ['api', 'cli', 'schedule', 'data', 'git', 'dev']; // what started a run (runs.trigger)
const EVENTS_KEPT = 500;
const BIG_TABLE = 300; // a run with more steps shows its steps table when asked (the DAG has them all) // rows of the run's audit trail kept on the page
const RECONNECTS = 5; // a dropped stream is reopened this many times, backing off

// ---- the runs list ----

export async function runsPage(params) {
  const state = params.get('state') || '', workflow = params.get('workflow') || '', trigger = params.get('trigger') || '';
  const signal = viewSignal();
  const stateSel = el('select', { id: 'f-state', name: 'state' }, el('option', { value: '' }, 'any'),
    RUN_STATES.map((s) => el('option', { value: s, selected: s === state }, `${SYMBOLS[s]} ${s}`)));
  const wfIn = el('input', { id: 'f-workflow', name: 'workflow', value: workflow, placeholder: 'any', spellcheck: 'false',
    pattern: '[a-z0-9][a-z0-9_.\\-]{0,62}', title: 'a workflow name: lower-case letters, digits, _ . -' });
  const trigSel = el('select', { id: 'f-trigger', name: 'trigger' }, el('option', { value: '' }, 'any'),
    TRIGGERS.map((t) => el('option', { value: t, selected: t === trigger }, t)));
  const filters = el('form', { class: 'filters', role: 'search', onsubmit: (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    if (stateSel.value) q.set('state', stateSel.value);
    if (trigSel.value) q.set('trigger', trigSel.value);
    if (wfIn.value.trim()) q.set('workflow', wfIn.value.trim());
    location.hash = `#/runs${q.toString() ? `?${q}` : ''}`;
  } },
  el('div', {}, el('label', { for: 'f-state' }, 'State'), stateSel),
  el('div', {}, el('label', { for: 'f-workflow' }, 'Workflow'), wfIn),
  el('div', {}, el('label', { for: 'f-trigger' }, 'Trigger'), trigSel),
  el('button', { type: 'submit' }, 'Filter'));
  const tbody = el('tbody');
  const table = el('div', { class: 'table-wrap' }, el('table', { id: 'runs' },
    el('caption', { class: 'note' }, 'Newest first'),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Run'), el('th', { scope: 'col' }, 'Workflow'),
      el('th', { scope: 'col' }, 'State'), el('th', { scope: 'col', class: 'opt' }, 'Trigger'),
      el('th', { scope: 'col' }, 'Created'))), tbody));
  const older = el('button', { type: 'button', id: 'older', hidden: true }, 'Older runs');
  const status = el('span', { class: 'note', 'aria-live': 'polite' });
  const live = el('p', { class: 'live', id: 'live', 'aria-live': 'polite' });
  // runs ticked to compare (kept when the list is read again): 2 to 5 open #/compare?runs=…, oldest first
  const picked = new Set();
  const compareBtn = el('button', { type: 'button', id: 'compare-selected', disabled: true, onclick: () => {
    location.hash = `#/compare?runs=${[...picked].sort((a, b) => a - b).join(',')}`;
  } }, 'Compare selected');
  const pickedNote = el('span', { class: 'note', id: 'compare-note', 'aria-live': 'polite' }, 'Tick 2 to 5 runs to compare them.');
  function pick(id, on) {
    if (on) picked.add(id); else picked.delete(id);
    compareBtn.disabled = picked.size < 2 || picked.size > 5;
    pickedNote.textContent = picked.size > 5 ? `${picked.size} ticked: 5 at most.` : picked.size ? `${picked.size} ticked.` : 'Tick 2 to 5 runs to compare them.';
  }
  setView(el('h1', {}, 'Runs'), live, filters, el('div', { class: 'actions' }, compareBtn, pickedNote), table,
    el('div', { class: 'paging' }, older, status));

  let cursor = null;
  const rows = new Map(); // run id → its row
  const none = state || workflow || trigger ? 'No runs match these filters.'
    : 'No runs yet. Submit one from Submit, or with ferry submit FILE.yaml.';
  function row(r) {
    return el('tr', { 'data-run': r.id },
      el('td', { class: 'num' }, el('input', { type: 'checkbox', class: 'pick', 'aria-label': `Compare run #${r.id}`,
        checked: picked.has(r.id), onchange: (ev) => pick(r.id, ev.target.checked) }), el('a', { href: `#/runs/${r.id}` }, `#${r.id}`)),
      el('td', {}, r.workflow || ''),
      el('td', {}, stateBadge(r.waiting && r.waiting.length && r.state === 'running' ? 'waiting' : r.state)),
      el('td', { class: 'opt' }, r.trigger || ''),
      el('td', {}, timeCell(r.created_at)));
  }
  function query(after) {
    const q = new URLSearchParams({ limit: '50' });
    if (state) q.set('state', state);
    if (workflow) q.set('workflow', workflow);
    if (trigger) q.set('trigger', trigger);
    if (after) q.set('cursor', after);
    return `/runs?${q}`;
  }
  async function load() {
    status.textContent = 'Loading…';
    const page = await callJSON(query(cursor), { signal });
    for (const r of page.runs || []) {
      if (rows.has(r.id)) continue;
      const tr = row(r);
      rows.set(r.id, tr);
      tbody.append(tr);
    }
    cursor = page.next_cursor || null;
    older.hidden = !cursor;
    status.textContent = rows.size ? `${rows.size} shown` : none;
  }
  // A change somewhere: the newest page read again; its runs replace their rows, new ones go on top.
  async function refresh() {
    const page = await callJSON(query(null), { signal });
    const fresh = [];
    for (const r of page.runs || []) {
      const tr = row(r);
      const old = rows.get(r.id);
      if (old) old.replaceWith(tr);
      else fresh.push(tr);
      rows.set(r.id, tr);
    }
    tbody.prepend(...fresh);
    // a run inside the page's range that is not in it any more no longer matches the filter: it goes
    const ids = new Set((page.runs || []).map((r) => r.id));
    const low = page.next_cursor ? Math.min(...ids) : 0;
    for (const [id, tr] of rows) if (id > low && !ids.has(id)) { tr.remove(); rows.delete(id); }
    status.textContent = rows.size ? `${rows.size} shown` : none;
  }
  older.addEventListener('click', () => load().catch(showError));
  await load();
  watchList(signal, refresh, live).catch((e) => {
    if (!quiet(e)) live.textContent = `Live updates stopped: ${e.message}. Reload to see the latest.`;
  });
}

// The runs list's stream (GET /runs/stream): each `event: runs` says
// something changed, and onChange reads the page again (one read at a time;
// a change during it makes one more). Reopened like a run's.
async function watchList(signal, onChange, live) {
  let busy = false, again = false;
  async function changed() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do { again = false; await onChange(); } while (again);
    } catch (e) {
      if (!quiet(e)) live.textContent = `Could not refresh: ${e.message}`;
    } finally {
      busy = false;
    }
  }
  for (let tries = 0; ; tries++) {
    const res = await call('/runs/stream', { signal, headers: { Accept: 'text/event-stream' } });
    if (res.status === 404 || res.status === 405) { live.textContent = 'Live updates are unavailable from this daemon: reload to see changes.'; return; }
    if (!res.ok) throw new Error(`the stream answered HTTP ${res.status}`);
    live.textContent = '● Live';
    // every event, the first too: what changed between the page's read (or the drop) and the connect
    await readSSE(res.body, signal, (event) => {
      if (event !== 'runs') return;
      tries = 0;
      changed();
    });
    if (tries >= RECONNECTS) throw new Error('the stream kept closing');
    live.textContent = 'Reconnecting…';
    await new Promise((ok, fail) => {
      const t = setTimeout(ok, 500 * 2 ** tries);
      signal.addEventListener('abort', () => { clearTimeout(t); fail(new DOMException('aborted', 'AbortError')); }, { once: true });
    });
  }
}

// ---- a run ----

// The DAG from dag.svg, made safe to inline: no script, no event handler, no
// style attribute (the CSP would refuse it), no link outside the document.
// Handler and style attributes are cut from the text before it is parsed:
// Chrome checks them against the CSP (and reports a violation) as soon as
// any document of the page holds them, even an inert parsed one.
function cleanSvg(text) {
  // XML quotes every attribute value and puts space before every name, so this takes out every
  // handler and style attribute (event handlers exist only in the null namespace: "x:onclick" is none)
  // (and style and script elements: parsed, an inline style is checked against the CSP and reported)
  const bare = text.replace(/\s(on[a-z]+|style)\s*=\s*("[^"]*"|'[^']*')/gi, '')
    .replace(/<(style|script)\b[^>]*?(\/>|>[\s\S]*?<\/\1\s*>)/gi, '');
  // parsed as HTML (the SVG lands in the SVG namespace as it would inline): twice as fast as the XML
  // parser on a 2,000-step DAG (40 ms, not 100). A DOMParser document runs no script and fires no handler.
  const doc = new DOMParser().parseFromString(bare, 'text/html');
  const svg = doc.body && doc.body.firstElementChild;
  if (!svg || svg.namespaceURI !== 'http://www.w3.org/2000/svg' || svg.localName !== 'svg') return null;
  for (const bad of svg.querySelectorAll('script, foreignObject, style, set, animate')) bad.remove();
  // links (href in any namespace) that leave the document; the only attribute walk left, over the few
  // elements that have one: a 2,000-step DAG has some 50,000 attributes, and walking them all cost 150 ms
  for (const n of svg.querySelectorAll('[*|href]')) {
    for (let i = n.attributes.length - 1; i >= 0; i--) {
      const at = n.attributes[i];
      if (at.localName === 'href' && !at.value.startsWith('#')) n.removeAttributeNode(at);
    }
  }
  // a handler the text pass could not see (none should be left): refuse the whole SVG rather than miss one
  if (svg.querySelector('[onload], [onclick], [onerror], [onmouseover], [onfocus], [onbegin]')) return null;
  // Graphviz's width and height stay: a small graph keeps its size, a wide one is scaled to fit (style.css).
  // Adopted, not imported: a deep copy of a big SVG costs more than moving it
  return document.adoptNode(svg);
}

export async function runPage(id) {
  const signal = viewSignal();
  // dag.svg is asked for at once, beside the run's JSON and whoami, and parsed
  // as soon as it comes (while the run's JSON may still be on its way): on a
  // big run it is the longest wait (a 2,000-step layout takes the daemon
  // ~0.4 s the first time; parsing its 1.5 MB ~0.1 s). An error is kept for below.
  const svgReady = call(`/runs/${id}/dag.svg`, { signal })
    .then(async (res) => (res.ok ? cleanSvg(await res.text()) : null)).catch((e) => e);
  const runReq = callJSON(`/runs/${id}`, { signal });
  runReq.catch(() => {}); // its error is thrown by the await below, not reported as unhandled meanwhile
  const who = await whoami();
  let run = await runReq;
  let selected = null;
  let following = false;

  const head = el('div', { class: 'run-head' });
  const live = el('p', { class: 'live', id: 'live', 'aria-live': 'polite' }, 'Connecting to live updates…');
  const out = resultRegion();
  const runActions = el('div', { class: 'actions', id: 'run-actions' });
  const dag = el('div', { class: 'dag', id: 'dag', hidden: true });
  const stepsBody = el('tbody');
  const steps = el('div', { class: 'table-wrap' }, el('table', { class: 'steps', id: 'steps' },
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Step'), el('th', { scope: 'col' }, 'State'),
      el('th', { scope: 'col', class: 'opt' }, 'Attempts'), el('th', { scope: 'col' }, 'Duration'))), stepsBody));
  // a big run's table waits until it is opened: the DAG shows every step, and 2,000 rows cost the page 80 ms
  let tableOn = (run.steps || []).length <= BIG_TABLE;
  const stepsBox = tableOn ? el('div', {}, el('h2', {}, 'Steps'), steps)
    : el('details', { id: 'steps-box' }, el('summary', {}, `Steps (${run.steps.length}) as a table`), steps);
  stepsBox.addEventListener('toggle', () => { if (stepsBox.open && !tableOn) { tableOn = true; renderSteps(); } });
  const detail = el('section', { class: 'detail', id: 'detail', 'aria-live': 'polite' },
    el('p', { class: 'note' }, 'Select a step (in the graph or the table) to see its attempts, command, outputs, metrics and log.'));
  const eventsBody = el('tbody');
  const events = el('details', { id: 'events' }, el('summary', {}, 'Events (who did what)'),
    el('div', { class: 'table-wrap' }, el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'At'), el('th', {}, 'Actor'),
      el('th', {}, 'Event'), el('th', {}, 'Step'), el('th', { class: 'opt' }, 'Detail'))), eventsBody)));
  const panel = new StepPanel({ container: detail, runId: id, signal, who, out, onRun: (r) => { update(r); followAgain(); } });
  detail.addEventListener('rerender', () => panel.render(run, false));
  const timeline = new Timeline({ runId: id, signal, onSelect: (name) => select(name) });
  setView(el('p', {}, el('a', { href: '#/runs' }, '← Runs')), head, runActions, roleNote(who), out, live,
    el('div', { class: 'run-body' }, el('div', {}, dag, stepsBox), detail), timeline.element, events);

  function renderHead() {
    head.replaceChildren(el('h1', {}, `Run #${run.id} `, stateBadge(run.state)),
      el('dl', {},
        el('dt', {}, 'Workflow'), el('dd', {}, run.workflow || ''),
        el('dt', {}, 'Trigger'), el('dd', {}, run.trigger || ''),
        run.actor ? [el('dt', {}, 'Started by'), el('dd', {}, run.actor)] : null,
        el('dt', {}, 'Created'), el('dd', {}, timeCell(run.created_at)),
        el('dt', {}, 'Duration'), el('dd', {}, duration(run.started_at, run.finished_at)),
        run.params && Object.keys(run.params).length ? [el('dt', {}, 'Params'),
          el('dd', {}, Object.entries(run.params).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(', '))] : null,
        run.reason ? [el('dt', {}, 'Reason'), el('dd', {}, run.reason)] : null,
        run.waiting && run.waiting.length ? [el('dt', {}, 'Waiting'), el('dd', {}, run.waiting.map((w, i) => [i ? ', ' : '',
          el('button', { type: 'button', class: 'step-link', onclick: () => select(w) }, w)]))] : null));
    const final = FINAL.has(run.state);
    const stop = actionButton('■ Stop run', who, async () => {
      const r = await act({ btn: stop, out, what: `Stop run #${run.id}`, path: `/runs/${run.id}/stop`, signal, who });
      if (r) update(r);
    }, { id: 'stop', hidden: final || run.state === 'stopping' });
    const retry = actionButton('↻ Retry failed steps', who, async () => {
      const r = await act({ btn: retry, out, what: `Retry run #${run.id}`, path: `/runs/${run.id}/retry`, signal, who });
      if (r) { update(r); followAgain(); }
    }, { id: 'retry', hidden: !final || run.state === 'succeeded', title: 'run the failed and stopped steps again' });
    runActions.replaceChildren(stop, retry);
  }

  // The steps table and the DAG's nodes are changed in place, never rebuilt:
  // a row or a node is touched only when its step changed. Rebuilding the
  // 2,000 rows of a big run (and restyling its 2,000 nodes, each found by a
  // selector scan of the whole SVG) on every stream event and every click
  // cost hundreds of ms of layout (make bench: bench_ui).
  const rows = new Map(); // step name → { tr, state, attempts, took (the cells), key (what they show) }
  const nodes = new Map(); // step name → { g, title, state (the class it has) }, filled when the DAG is in

  function stepRow(s) {
    const r = { tr: el('tr', { 'data-step': s.name }), state: el('td'), attempts: el('td', { class: 'num opt' }), took: el('td'), key: '' };
    r.tr.append(el('td', {}, el('button', { type: 'button', class: 'step-link', onclick: () => select(s.name) }, s.name)),
      r.state, r.attempts, r.took);
    return r;
  }

  function renderSteps() {
    const list = run.steps || [];
    if (tableOn && (rows.size !== list.length || list.some((s) => !rows.has(s.name)))) { // the first time (a run's steps never change)
      rows.clear();
      for (const s of list) rows.set(s.name, stepRow(s));
      stepsBody.replaceChildren(...[...rows.values()].map((r) => r.tr));
    }
    for (const s of list) {
      if (tableOn) renderRow(s);
      // the DAG's nodes take their step's state as a class; the SVG itself is fetched once
      const n = nodes.get(s.name);
      if (!n || n.state === s.state) continue;
      if (n.state) n.g.classList.remove(`state-${n.state}`);
      n.g.classList.add(`state-${s.state}`);
      n.state = s.state;
      if (n.title) n.title.textContent = `${s.name}: ${s.state}`;
      n.g.setAttribute('aria-label', `${s.name}: ${s.state}`);
    }
  }

  function renderRow(s) {
    const r = rows.get(s.name);
    const key = `${s.state} ${s.attempts} ${s.started_at} ${s.finished_at} ${s.items ? s.items.done : ''}`;
    // a running step's duration grows: it is written again on every update
    if (key !== r.key || (s.started_at && !s.finished_at)) {
      if (key !== r.key) {
        r.state.replaceChildren(stateBadge(s.state));
        // a fan-out: its items done of all, not its one (expansion) attempt
        r.attempts.textContent = s.items ? `${s.items.done}/${s.items.total} items` : (s.attempts ?? 0);
      }
      r.took.textContent = duration(s.started_at, s.finished_at);
      r.key = key;
    }
    r.tr.classList.toggle('selected', s.name === selected);
  }

  function update(next) {
    run = next;
    renderHead();
    renderSteps();
    timeline.changed(run);
    if (selected) panel.render(run, false);
    if (events.open) loadEvents();
  }

  // The stream's runs, drawn once per frame with the latest: a big live run sends many a second, and
  // drawing each kept a loaded machine's page too busy to take a click
  let pending = null;
  function streamed(next) {
    if (pending === null) requestAnimationFrame(() => { const r = pending; pending = null; if (!signal.aborted) update(r); });
    pending = next;
  }

  function select(name) {
    // the node shows it is the one open (an outline, not a colour alone: style.css)
    if (nodes.has(selected)) nodes.get(selected).g.classList.remove('selected');
    if (nodes.has(name)) nodes.get(name).g.classList.add('selected');
    selected = name;
    panel.select(name);
    renderSteps();
    panel.render(run, true);
  }

  // The audit trail, read when opened and then after each change (only what is new: ?after=).
  let lastEvent = 0, eventsBusy = false;
  async function loadEvents() {
    if (eventsBusy) return;
    eventsBusy = true;
    try {
      const page = await callJSON(`/runs/${id}/events?after=${lastEvent}`, { signal });
      for (const e of page.events || []) {
        lastEvent = Math.max(lastEvent, e.id);
        eventsBody.prepend(el('tr', { 'data-kind': e.kind }, el('td', {}, timeCell(e.at)), el('td', {}, e.actor || ''),
          el('td', {}, e.kind), el('td', {}, e.step || ''),
          el('td', { class: 'opt' }, e.detail ? (typeof e.detail === 'string' ? e.detail : JSON.stringify(e.detail)) : '')));
      }
      while (eventsBody.children.length > EVENTS_KEPT) eventsBody.lastChild.remove();
    } catch (e) {
      if (!quiet(e)) eventsBody.replaceChildren(el('tr', {}, el('td', { colspan: '5' }, `No events: ${e.message}`)));
    } finally {
      eventsBusy = false;
    }
  }
  events.addEventListener('toggle', () => { if (events.open) loadEvents(); });

  // After an action that sets a finished run going again, its stream is opened again.
  function followAgain() {
    if (following || FINAL.has(run.state)) return;
    following = true;
    follow(id, signal, streamed, live).catch((e) => {
      if (quiet(e)) return;
      live.textContent = `Live updates stopped: ${e.message}. Reload to see the latest.`;
    }).finally(() => { following = false; });
  }

  renderHead();
  renderSteps();

  // the DAG: once; without the route (or Graphviz), the table alone says it all
  try {
    const svg = await svgReady;
    if (svg instanceof Error) throw svg;
    if (svg) {
      dag.replaceChildren(svg);
      dag.hidden = false;
      for (const g of dag.querySelectorAll('g.step, g[id^="step-"]')) {
        nodes.set(g.id.slice('step-'.length), { g, title: g.querySelector('title'), state: null });
        g.classList.add('step');
        g.setAttribute('tabindex', '0');
        g.setAttribute('role', 'button');
      }
      // one listener each for all the nodes (a 2,000-step DAG had 4,000)
      const nodeOf = (ev) => {
        const g = ev.target instanceof Element ? ev.target.closest('g.step') : null;
        return g && dag.contains(g) ? g.id.slice('step-'.length) : null;
      };
      dag.addEventListener('click', (ev) => { const name = nodeOf(ev); if (name) select(name); });
      dag.addEventListener('keydown', (ev) => {
        const name = (ev.key === 'Enter' || ev.key === ' ') && nodeOf(ev);
        if (name) { ev.preventDefault(); select(name); }
      });
      renderSteps();
    }
  } catch (e) {
    if (e instanceof Unauthorized || e.name === 'AbortError') return;
  }
  if (dag.hidden && !tableOn) stepsBox.open = true; // no DAG: the table it is
  // the timeline once the DAG is drawn: its read and its rows do not hold up the page's first picture
  timeline.changed(run);

  if (FINAL.has(run.state)) {
    live.textContent = `The run is over (${run.state}).`;
    return;
  }
  followAgain();
}

// Reads the run's SSE stream with fetch (EventSource cannot send the
// Authorization header): "event: run" carries the run's JSON, "event: end"
// closes it. A dropped stream is reopened up to RECONNECTS times, backing
// off; a missing route is said once and never retried.
async function follow(id, signal, onRun, live) {
  for (let tries = 0; ; tries++) {
    let ended = false;
    const res = await call(`/runs/${id}/stream`, { signal, headers: { Accept: 'text/event-stream' } });
    if (res.status === 404 || res.status === 405) {
      let why = '';
      try { const b = await res.json(); if (b.error && b.error.field === 'id') why = b.error.message; } catch { /* */ }
      if (why) throw new Error(why);
      live.textContent = 'Live updates are unavailable from this daemon (no stream route): reload the page to see changes.';
      return;
    }
    if (!res.ok || !(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
      throw new Error(`the stream answered HTTP ${res.status}`);
    }
    live.textContent = '● Live';
    await readSSE(res.body, signal, (event, data) => {
      if (event === 'run') {
        const r = JSON.parse(data);
        onRun(r);
        tries = 0;
      } else if (event === 'end') {
        ended = true;
      }
    });
    if (ended) { live.textContent = 'The run is over.'; return; }
    if (tries >= RECONNECTS) throw new Error('the stream kept closing');
    live.textContent = 'Reconnecting…';
    await new Promise((ok, fail) => {
      const t = setTimeout(ok, 500 * 2 ** tries);
      signal.addEventListener('abort', () => { clearTimeout(t); fail(new DOMException('aborted', 'AbortError')); }, { once: true });
    });
  }
}
