// Ferry console: what starts runs by itself. #/schedules lists the cron
// schedules (workflow, cron, zone, paused, next fire, last tick) and the
// data and git triggers (GET /triggers), each with Pause/Resume;
// #/schedules/ID shows a schedule: its next fire times in UTC and in its
// zone, with the note on any a DST change moves or skips (as GET
// /schedules/{id} computes them), and its tick history, paged back with the
// API's `before` cursor (unix seconds: ticks nominally before it). Pause and
// resume are PATCH {"paused": bool}; the outcome, or the API's message, goes
// to the result region.

import { el, stateBadge, timeCell, parseTime, callJSON, setView, viewSignal, emptyState } from './lib.js';
import { whoami, resultRegion, roleNote, actionButton, act } from './actions.js';

const TICKS_PAGE = 20; // ticks per page of the history

// Paused or active as symbol and word (not colour alone).
function pausedWord(paused) {
  return el('span', { class: `state ${paused ? 'state-waiting' : 'state-running'}` },
    el('span', { class: 'sym', 'aria-hidden': 'true' }, paused ? '‖' : '▶'), paused ? 'paused' : 'active');
}

// A tick's or a fire's outcome (fired or skipped, schedule_ticks' CHECK) as symbol and word.
function outcomeBadge(o) {
  const s = o === 'fired' ? 'succeeded' : o === 'skipped' ? 'skipped' : 'failed';
  return el('span', { class: `state state-${s}` }, el('span', { class: 'sym', 'aria-hidden': 'true' },
    s === 'succeeded' ? '✓' : s === 'skipped' ? '↷' : '✗'), o || '?');
}

// A Pause or Resume button for what lives at path; onDone(answer) after success.
function pauseButton({ who, out, signal, path, paused, what, onDone, id }) {
  const btn = actionButton(paused ? '▶ Resume' : '‖ Pause', who, null, { id, 'data-paused': paused ? 'true' : 'false' });
  btn.addEventListener('click', async () => {
    const r = await act({ btn, out, what: `${paused ? 'Resume' : 'Pause'} ${what}`, path, method: 'PATCH',
      body: { paused: !paused }, signal, who });
    if (r) onDone(r);
  });
  return btn;
}

// ---- the list: schedules and triggers ----

export async function schedulesPage() {
  const signal = viewSignal();
  const who = await whoami();
  const out = resultRegion();
  const sBox = el('div'), tBox = el('div');
  setView(el('h1', {}, 'Schedules'), roleNote(who), out, sBox, el('h2', { id: 'triggers-h' }, 'Data and git triggers'), tBox);

  async function loadSchedules() {
    const page = await callJSON('/schedules', { signal });
    const list = page.schedules || [];
    sBox.replaceChildren(list.length ? el('div', { class: 'table-wrap' }, el('table', { id: 'schedules' },
      el('thead', {}, el('tr', {}, ['Schedule', 'Cron', 'Zone', 'State', 'Next fire', 'Last tick'].map((h, i) =>
        el('th', { scope: 'col', class: i === 5 ? 'opt' : null }, h)), el('th', { scope: 'col' }, el('span', { class: 'sr-only' }, 'Pause or resume')))),
      el('tbody', {}, list.map((s) => el('tr', { 'data-schedule': s.id },
        el('td', {}, el('a', { href: `#/schedules/${s.id}` }, `${s.workflow} / ${s.name}`),
          s.source && s.source !== 'api' ? el('span', { class: 'note' }, ` (${s.source})`) : null),
        el('td', {}, el('code', {}, s.cron)),
        el('td', {}, s.timezone),
        el('td', { class: 'paused' }, pausedWord(s.paused)),
        el('td', {}, s.paused ? el('span', { class: 'note' }, 'none while paused') : timeCell(s.next_at)),
        el('td', { class: 'opt' }, s.last ? [outcomeBadge(s.last.outcome), ' ', timeCell(s.last.nominal_at)] : '—'),
        el('td', {}, pauseButton({ who, out, signal, path: `/schedules/${s.id}`, paused: s.paused,
          what: `schedule ${s.workflow}/${s.name}`, onDone: () => loadSchedules(), id: `pause-s${s.id}` })))))))
      : emptyState('No schedules yet. Add one with a `schedule: {cron: "0 3 * * *"}` key in a workflow, or `ferry schedules create WORKFLOW \'0 3 * * *\'` (an admin).', 'schedules-empty'));
  }

  async function loadTriggers() {
    const page = await callJSON('/triggers', { signal });
    const list = page.triggers || [];
    tBox.replaceChildren(list.length ? el('div', { class: 'table-wrap' }, el('table', { id: 'triggers' },
      el('thead', {}, el('tr', {}, ['Trigger', 'Kind', 'Watching', 'State', 'Last fire'].map((h) => el('th', { scope: 'col' }, h)),
        el('th', { scope: 'col' }, el('span', { class: 'sr-only' }, 'Pause or resume')))),
      el('tbody', {}, list.map((t) => {
        const f = (t.fires || [])[0];
        return el('tr', { 'data-trigger': t.id },
          el('td', {}, `${t.workflow} / ${t.name}`),
          el('td', {}, t.kind),
          el('td', {}, t.watching ? (t.commit ? `commit ${String(t.commit).slice(0, 10)}` : `${t.files} files`) : 'not yet (no baseline)'),
          el('td', { class: 'paused' }, pausedWord(t.paused)),
          el('td', {}, f ? [outcomeBadge(f.outcome), ' ', timeCell(f.at), f.run ? ' ' : null, f.run ? el('a', { href: `#/runs/${f.run}` }, `#${f.run}`) : null] : '—'),
          el('td', {}, pauseButton({ who, out, signal, path: `/triggers/${t.id}`, paused: t.paused,
            what: `trigger ${t.workflow}/${t.name}`, onDone: () => loadTriggers(), id: `pause-t${t.id}` })));
      }))))
      : emptyState('No data or git triggers. A workflow\'s `triggers:` key adds one: `- data: {path: DIR}` starts a run when files land there, `- git: {repo: URL, branch: main}` on each new commit.', 'triggers-empty'));
  }

  await Promise.all([loadSchedules(), loadTriggers()]);
}

// ---- one schedule ----

export async function schedulePage(id) {
  const signal = viewSignal();
  const who = await whoami();
  let s = await callJSON(`/schedules/${id}?limit=${TICKS_PAGE}`, { signal });
  const head = el('div', { class: 'run-head' });
  const out = resultRegion();
  const acts = el('div', { class: 'actions' });
  const nextBox = el('div');
  const ticksBody = el('tbody');
  const older = el('button', { type: 'button', id: 'older-ticks', hidden: true }, 'Older ticks');
  const status = el('span', { class: 'note', 'aria-live': 'polite' });
  setView(el('p', {}, el('a', { href: '#/schedules' }, '← Schedules')), head, acts, roleNote(who), out,
    el('h2', {}, 'Next fire times'), nextBox,
    el('h2', {}, 'Tick history'), el('div', { class: 'table-wrap' }, el('table', { id: 'ticks' },
      el('caption', { class: 'note' }, 'Newest first'),
      el('thead', {}, el('tr', {}, ['Due', 'Outcome', 'Run', 'Late', 'Reason'].map((h, i) =>
        el('th', { scope: 'col', class: i === 3 ? 'opt' : null }, h)))), ticksBody)),
    el('div', { class: 'paging' }, older, status));

  function render() {
    head.replaceChildren(el('h1', {}, `Schedule ${s.workflow} / ${s.name} `, pausedWord(s.paused)),
      el('dl', {},
        el('dt', {}, 'Workflow'), el('dd', {}, s.workflow),
        el('dt', {}, 'Cron'), el('dd', {}, el('code', {}, s.cron)),
        el('dt', {}, 'Zone'), el('dd', {}, s.timezone),
        el('dt', {}, 'Missed ticks'), el('dd', {}, `catch-up ${s.catchup} (at most ${s.max_catchup}), overlap ${s.overlap}, DST gap ${s.gap}`),
        el('dt', {}, 'Concurrency'), el('dd', {}, s.concurrency),
        s.params && Object.keys(s.params).length ? [el('dt', {}, 'Params'), el('dd', {}, JSON.stringify(s.params))] : null,
        el('dt', {}, 'Defined by'), el('dd', {}, s.source === 'workflow' ? 'the workflow\'s YAML (edit the timing there)' : s.source || 'api')));
    acts.replaceChildren(pauseButton({ who, out, signal, path: `/schedules/${id}`, paused: s.paused,
      what: `schedule ${s.workflow}/${s.name}`, id: 'pause',
      onDone: (r) => { s = { ...s, ...r, ticks: s.ticks }; render(); } }));
    const next = s.next || [];
    nextBox.replaceChildren(...[s.paused ? el('p', { class: 'note', id: 'next-paused' }, 'Paused: nothing fires until it is resumed. Were it resumed now, these would be next:') : null,
      next.length ? el('div', { class: 'table-wrap' }, el('table', { id: 'next' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'When (your zone)'), el('th', { scope: 'col' }, `Wall clock in ${s.timezone}`),
          el('th', { scope: 'col' }, 'DST note'))),
        el('tbody', {}, next.map((n) => el('tr', { class: n.note ? 'dst' : null },
          el('td', {}, timeCell(n.at)), el('td', {}, n.local),
          el('td', {}, n.note ? el('span', {}, el('span', { 'aria-hidden': 'true' }, '⚠ '), n.note) : '—'))))))
        : el('p', { class: 'note' }, 'No next fire time.')].filter(Boolean));
  }

  // ticks: the first page came with the schedule; older ones by the cursor (the oldest shown, in unix seconds)
  function addTicks(ticks) {
    for (const t of ticks) {
      ticksBody.append(el('tr', { 'data-nominal': t.nominal_at },
        el('td', {}, timeCell(t.nominal_at)), el('td', {}, outcomeBadge(t.outcome)),
        el('td', {}, t.run ? el('a', { href: `#/runs/${t.run}` }, `#${t.run}`) : '—'),
        el('td', { class: 'num opt' }, typeof t.late_ms === 'number' ? `${(t.late_ms / 1000).toFixed(1)} s` : '—'),
        el('td', {}, t.reason || '')));
    }
    const last = ticks[ticks.length - 1];
    const d = last && parseTime(last.nominal_at);
    cursor = ticks.length === TICKS_PAGE && d ? Math.floor(d.getTime() / 1000) : null;
    older.hidden = !cursor;
    status.textContent = ticksBody.children.length ? `${ticksBody.children.length} shown` : 'No ticks yet.';
  }
  let cursor = null;
  older.addEventListener('click', async () => {
    older.disabled = true;
    try {
      const page = await callJSON(`/schedules/${id}?limit=${TICKS_PAGE}&before=${cursor}`, { signal });
      addTicks(page.ticks || []);
    } catch (e) {
      status.textContent = `Error: ${e.message}`;
    } finally {
      older.disabled = false;
    }
  });

  render();
  addTicks(s.ticks || []);
}
