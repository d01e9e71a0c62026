// Ferry console: the runs list (#/runs, filtered by state, workflow and
// trigger, newest first, paged by cursor) and a run (#/runs/ID): its DAG
// from dag.svg (laid out by Graphviz on the server, cached per workflow
// version), step states applied by class as the run's SSE stream brings
// them, and a step's detail beside it.

import {
  $, el, stateBadge, timeCell, duration, call, callJSON, setView, showError, viewSignal, quiet, readSSE,
  SYMBOLS, RUN_STATES, FINAL, Unauthorized,
} from './lib.js';

const LOG_TAIL = 64 * 1024; // bytes of a step's log shown: the tail only, whatever its size
const RECONNECTS = 5; // a dropped stream is reopened this many times, backing off

// ---- the runs list ----

export async function runsPage(params) {
  const state = params.get('state') || '', workflow = params.get('workflow') || '';
  const signal = viewSignal();
  const stateSel = el('select', { id: 'f-state', name: 'state' }, el('option', { value: '' }, 'any'),
    RUN_STATES.map((s) => el('option', { value: s, selected: s === state }, `${SYMBOLS[s]} ${s}`)));
  const wfIn = el('input', { id: 'f-workflow', name: 'workflow', value: workflow, placeholder: 'any', spellcheck: 'false',
    pattern: '[a-z0-9][a-z0-9_.\\-]{0,62}', title: 'a workflow name: lower-case letters, digits, _ . -' });
  const filters = el('form', { class: 'filters', role: 'search', onsubmit: (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    if (stateSel.value) q.set('state', stateSel.value);
    if (wfIn.value.trim()) q.set('workflow', wfIn.value.trim());
    location.hash = `#/runs${q.toString() ? `?${q}` : ''}`;
  } },
  el('div', {}, el('label', { for: 'f-state' }, 'State'), stateSel),
  el('div', {}, el('label', { for: 'f-workflow' }, 'Workflow'), wfIn),
  el('button', { type: 'submit' }, 'Filter'));
  const tbody = el('tbody');
  const table = el('div', { class: 'table-wrap' }, el('table', { id: 'runs' },
    el('caption', { class: 'note' }, 'Newest first'),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Run'), el('th', { scope: 'col' }, 'Workflow'),
      el('th', { scope: 'col' }, 'State'), el('th', { scope: 'col', class: 'opt' }, 'Trigger'),
      el('th', { scope: 'col' }, 'Created'))), tbody));
  const older = el('button', { type: 'button', id: 'older', hidden: true }, 'Older runs');
  const status = el('span', { class: 'note', 'aria-live': 'polite' });
  setView(el('h1', {}, 'Runs'), filters, table, el('div', { class: 'paging' }, older, status));

  let cursor = null;
  async function load() {
    const q = new URLSearchParams({ limit: '50' });
    if (state) q.set('state', state);
    if (workflow) q.set('workflow', workflow);
    if (cursor) q.set('cursor', cursor);
    status.textContent = 'Loading…';
    const page = await callJSON(`/runs?${q}`, { signal });
    for (const r of page.runs || []) {
      tbody.append(el('tr', { 'data-run': r.id },
        el('td', { class: 'num' }, el('a', { href: `#/runs/${r.id}` }, `#${r.id}`)),
        el('td', {}, r.workflow || ''),
        el('td', {}, stateBadge(r.waiting && r.waiting.length && r.state === 'running' ? 'waiting' : r.state)),
        el('td', { class: 'opt' }, r.trigger || ''),
        el('td', {}, timeCell(r.created_at))));
    }
    cursor = page.next_cursor || null;
    older.hidden = !cursor;
    status.textContent = tbody.children.length ? `${tbody.children.length} shown` : 'No runs.';
  }
  older.addEventListener('click', () => load().catch(showError));
  await load();
}

// ---- a run ----

// The DAG from dag.svg, made safe to inline: no script, no event handler, no
// style attribute (the CSP would refuse it), no link outside the document.
// Handler and style attributes are cut from the text before it is parsed:
// Chrome checks them against the CSP (and reports a violation) as soon as
// any document of the page holds them, even an inert parsed one.
function cleanSvg(text) {
  const bare = text.replace(/\s(on[a-z]+|style)\s*=\s*("[^"]*"|'[^']*')/gi, '');
  const doc = new DOMParser().parseFromString(bare, 'image/svg+xml');
  const svg = doc.documentElement;
  if (!svg || svg.nodeName !== 'svg' || doc.querySelector('parsererror')) return null;
  for (const bad of svg.querySelectorAll('script, foreignObject, style')) bad.remove();
  for (const n of [svg, ...svg.querySelectorAll('*')]) {
    for (const a of [...n.attributes]) {
      const name = a.name.toLowerCase();
      if (name.startsWith('on') || name === 'style' ||
          ((name === 'href' || name === 'xlink:href') && !a.value.startsWith('#'))) n.removeAttribute(a.name);
    }
  }
  // Graphviz's width and height stay: a small graph keeps its size, a wide one is scaled to fit (style.css)
  return document.importNode(svg, true);
}

export async function runPage(id) {
  const signal = viewSignal();
  let run = await callJSON(`/runs/${id}`, { signal });
  let selected = null;

  const head = el('div', { class: 'run-head' });
  const live = el('p', { class: 'live', id: 'live', 'aria-live': 'polite' }, 'Connecting to live updates…');
  const dag = el('div', { class: 'dag', id: 'dag', hidden: true });
  const stepsBody = el('tbody');
  const steps = el('div', { class: 'table-wrap' }, el('table', { class: 'steps', id: 'steps' },
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Step'), el('th', { scope: 'col' }, 'State'),
      el('th', { scope: 'col', class: 'opt' }, 'Attempts'), el('th', { scope: 'col' }, 'Duration'))), stepsBody));
  const detail = el('section', { class: 'detail', id: 'detail', 'aria-live': 'polite' },
    el('p', { class: 'note' }, 'Select a step to see its attempts, outputs, metrics and log.'));
  setView(el('p', {}, el('a', { href: '#/runs' }, '← Runs')), head, live,
    el('div', { class: 'run-body' }, el('div', {}, dag, el('h2', {}, 'Steps'), steps), detail));

  function renderHead() {
    head.replaceChildren(el('h1', {}, `Run #${run.id} `, stateBadge(run.state)),
      el('dl', {},
        el('dt', {}, 'Workflow'), el('dd', {}, run.workflow || ''),
        el('dt', {}, 'Trigger'), el('dd', {}, run.trigger || ''),
        el('dt', {}, 'Created'), el('dd', {}, timeCell(run.created_at)),
        el('dt', {}, 'Duration'), el('dd', {}, duration(run.started_at, run.finished_at)),
        run.reason ? [el('dt', {}, 'Reason'), el('dd', {}, run.reason)] : null,
        run.waiting && run.waiting.length ? [el('dt', {}, 'Waiting'), el('dd', {}, run.waiting.join(', '))] : null));
  }

  function renderSteps() {
    stepsBody.replaceChildren(...(run.steps || []).map((s) => el('tr', {
      'data-step': s.name, class: s.name === selected ? 'selected' : null },
    el('td', {}, el('button', { type: 'button', class: 'step-link', onclick: () => select(s.name) }, s.name)),
    el('td', {}, stateBadge(s.state)),
    el('td', { class: 'num opt' }, s.attempts ?? 0),
    el('td', {}, duration(s.started_at, s.finished_at)))));
    // the DAG's nodes take their step's state as a class; the SVG itself is fetched once
    for (const s of run.steps || []) {
      const g = dag.querySelector(`g[id="step-${CSS.escape(s.name)}"]`);
      if (!g) continue;
      for (const c of [...g.classList]) if (c.startsWith('state-')) g.classList.remove(c);
      g.classList.add(`state-${s.state}`);
      const t = g.querySelector('title');
      if (t) t.textContent = `${s.name}: ${s.state}`;
      g.setAttribute('aria-label', `${s.name}: ${s.state}`);
    }
  }

  function update(next) {
    run = next;
    renderHead();
    renderSteps();
    if (selected) renderDetail(false);
  }

  function select(name) {
    selected = name;
    renderSteps();
    renderDetail(true);
  }

  let logCtl = null;
  function renderDetail(fresh) {
    const s = (run.steps || []).find((x) => x.name === selected);
    if (!s) return;
    const attempts = s.attempt_list || [];
    const parts = [el('h2', { id: 'detail-h', tabindex: '-1' }, `Step ${s.name} `, stateBadge(s.state))];
    const dl = el('dl', {},
      el('dt', {}, 'Kind'), el('dd', {}, s.kind || '—'),
      el('dt', {}, 'Attempts'), el('dd', {}, s.attempts ?? 0),
      el('dt', {}, 'Duration'), el('dd', {}, duration(s.started_at, s.finished_at)),
      s.exit_code !== undefined && s.exit_code !== null ? [el('dt', {}, 'Exit code'), el('dd', {}, s.exit_code)] : null,
      s.reason ? [el('dt', {}, 'Reason'), el('dd', { id: 'step-reason' }, s.reason)] : null,
      s.cached_from ? [el('dt', {}, 'Cached from'),
        el('dd', {}, el('a', { href: `#/runs/${s.cached_from.run}` }, `run #${s.cached_from.run}`),
          ` ${s.cached_from.step}, attempt ${s.cached_from.attempt}`)] : null);
    parts.push(el('div', { class: 'run-head' }, dl));
    if (attempts.length) {
      parts.push(el('h3', {}, 'Attempts'), el('div', { class: 'table-wrap' }, el('table', { id: 'attempts' },
        el('thead', {}, el('tr', {}, el('th', {}, '#'), el('th', {}, 'State'), el('th', {}, 'Started'),
          el('th', {}, 'Duration'), el('th', { class: 'opt' }, 'Exit'), el('th', {}, 'Reason'))),
        el('tbody', {}, attempts.map((a) => el('tr', {}, el('td', { class: 'num' }, a.attempt), el('td', {}, stateBadge(a.state)),
          el('td', {}, timeCell(a.started_at)), el('td', {}, duration(a.started_at, a.finished_at)),
          el('td', { class: 'num opt' }, a.exit_code ?? (a.signal ? `signal ${a.signal}` : '—')), el('td', {}, a.reason || '')))))));
    }
    if (s.metrics && Object.keys(s.metrics).length) {
      parts.push(el('h3', {}, 'Metrics'), el('table', { id: 'metrics' }, el('tbody', {},
        Object.entries(s.metrics).map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', { class: 'num' }, v))))));
    }
    if (s.gate && s.gate.length) {
      parts.push(el('h3', {}, 'Gate'), el('ul', {}, s.gate.map((g) => el('li', {},
        `${g.passed ? '✓ passed' : '✗ failed'}: ${g.metric} ${g.op} ${g.threshold} (value ${g.value}${g.against ? `, against ${g.against}` : ''})`))));
    }
    if (s.outputs !== undefined && s.outputs !== null) {
      parts.push(el('h3', {}, 'Outputs'), el('pre', { id: 'outputs' }, JSON.stringify(s.outputs, null, 2)));
    }
    const logPre = el('pre', { class: 'log', id: 'log', tabindex: '0', 'aria-label': `log of ${s.name}` });
    const logNote = el('p', { class: 'note', id: 'log-note' });
    parts.push(el('h3', {}, 'Log'), logNote, logPre);
    const old = fresh ? null : $('#log', detail);
    detail.replaceChildren(...parts);
    if (fresh) {
      $('#detail-h', detail).focus();
    } else if (old) {
      logPre.replaceWith(old); // a state change keeps the log shown; a new tail is read when the step ends
      logNote.textContent = old.dataset.note || '';
      if (old.dataset.state === s.state) return;
    }
    if (logCtl) logCtl.abort();
    logCtl = new AbortController();
    const target = $('#log', detail);
    target.dataset.state = s.state;
    loadLog(s, target, $('#log-note', detail), logCtl.signal).catch((e) => {
      if (e instanceof Unauthorized || e.name === 'AbortError') return;
      target.textContent = '';
      $('#log-note', detail).textContent = `No log: ${e.message}`;
    });
  }

  // The last LOG_TAIL bytes of the step's latest attempt: its size from a
  // HEAD, then a read from there; without a size, a read that keeps only the
  // last LOG_TAIL bytes, so memory stays bounded whatever the log's size.
  async function loadLog(s, pre, note, sig) {
    if (!s.attempts) { note.textContent = 'Not started: no log yet.'; pre.dataset.note = note.textContent; return; }
    const base = `/runs/${run.id}/steps/${encodeURIComponent(s.name)}/logs?attempt=${s.attempts}`;
    const anySignal = AbortSignal.any ? AbortSignal.any([sig, signal]) : sig;
    let size = null;
    const h = await call(base, { method: 'HEAD', signal: anySignal });
    if (h.ok && h.headers.get('Content-Length') !== null) size = Number(h.headers.get('Content-Length'));
    else if (!h.ok) throw new Error(h.status === 404 ? 'this attempt has no log' : `HTTP ${h.status}`);
    const offset = size !== null && size > LOG_TAIL ? size - LOG_TAIL : 0;
    const res = await call(`${base}&offset=${offset}`, { signal: anySignal });
    if (!res.ok) {
      let msg = `HTTP ${res.status}`;
      try { msg = (await res.json()).error.message; } catch { /* not JSON */ }
      throw new Error(msg);
    }
    let buf = new Uint8Array(0);
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      // buf + value, of which only the last LOG_TAIL bytes are kept
      const all = new Uint8Array(buf.length + value.length);
      all.set(buf);
      all.set(value, buf.length);
      if (all.length > LOG_TAIL && size === null) size = -1;
      buf = all.length > LOG_TAIL ? all.slice(all.length - LOG_TAIL) : all;
    }
    let text = new TextDecoder('utf-8', { fatal: false }).decode(buf);
    const cut = offset > 0 || size === -1;
    if (cut) text = text.slice(text.indexOf('\n') + 1); // the first line is likely cut in two
    pre.textContent = text;
    note.textContent = cut ? `The last ${Math.round(LOG_TAIL / 1024)} KiB of attempt ${s.attempts}'s log${size > 0 ? ` (${size} bytes in all)` : ''}.`
      : `Attempt ${s.attempts}'s log (${buf.length} bytes).`;
    pre.dataset.note = note.textContent;
    pre.scrollTop = pre.scrollHeight;
  }

  renderHead();
  renderSteps();

  // the DAG: once; without the route (or Graphviz), the table alone says it all
  try {
    const res = await call(`/runs/${id}/dag.svg`, { signal });
    const svg = res.ok ? cleanSvg(await res.text()) : null;
    if (svg) {
      dag.replaceChildren(svg);
      dag.hidden = false;
      for (const g of dag.querySelectorAll('g.step, g[id^="step-"]')) {
        const name = g.id.slice('step-'.length);
        g.classList.add('step');
        g.setAttribute('tabindex', '0');
        g.setAttribute('role', 'button');
        g.addEventListener('click', () => select(name));
        g.addEventListener('keydown', (ev) => {
          if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); select(name); }
        });
      }
      renderSteps();
    }
  } catch (e) {
    if (e instanceof Unauthorized || e.name === 'AbortError') return;
  }

  if (FINAL.has(run.state)) {
    live.textContent = `The run is over (${run.state}).`;
    return;
  }
  follow(id, signal, update, live).catch((e) => {
    if (e instanceof Unauthorized || e.name === 'AbortError') return;
    live.textContent = `Live updates stopped: ${e.message}. Reload to see the latest.`;
  });
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
