// Ferry console, shared parts: the API client (bearer token from
// sessionStorage; any 401 forgets it and shows the form with the server's
// reason), the view's AbortController (aborted when the route changes),
// element building that never parses HTML, states as symbol and word, times
// in the browser's zone with UTC on hover, and the SSE reader. Pages
// (runs.js, and one module per section) import from here; app.js routes.

export const API = '/api/v1';
const TOKEN_KEY = 'ferry.token';
// an event larger than this is a broken stream, not a run: the daemon's own bound (api_stream.c MAX_EVENT);
// a finished 5,000-step run (config.c's most) is some 3 MB of JSON, more with retries
const SSE_MAX = 32 * 1024 * 1024;

export const SYMBOLS = {
  pending: '…', running: '▶', stopping: '◼', succeeded: '✓', failed: '✗', stopped: '■', waiting: '‖',
  blocked: '○', ready: '◌', skipped: '↷', lost: '?',
};
export const RUN_STATES = ['pending', 'running', 'waiting', 'stopping', 'succeeded', 'failed', 'stopped'];
export const FINAL = new Set(['succeeded', 'failed', 'stopped']);

export const $ = (sel, root = document) => root.querySelector(sel);

// el('td', {class: 'x', title: 't'}, child…): an element; strings become text nodes (never HTML).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// A state as a symbol and its word, so it never rests on colour alone.
export function stateBadge(state) {
  const s = state || 'unknown';
  return el('span', { class: `state state-${s}` }, el('span', { class: 'sym', 'aria-hidden': 'true' }, SYMBOLS[s] || '·'), s);
}

// A list with nothing in it: what is missing and how the first one is made (code in backticks is shown as code).
export function emptyState(text, id) {
  return el('p', { class: 'empty', id }, text.split('`').map((part, i) => (i % 2 ? el('code', {}, part) : part)));
}

// PostgreSQL's "2026-11-24 13:42:11.5+00" or ISO 8601 → a Date (null when unparseable).
export function parseTime(t) {
  if (!t) return null;
  let s = String(t).replace(' ', 'T').replace(/([+-]\d\d)$/, '$1:00');
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? null : d;
}

// A time in the browser's zone, with UTC in the title (shown on hover and to screen readers on focus).
export function timeCell(t) {
  const d = parseTime(t);
  if (!d) return el('span', {}, t || '—');
  return el('time', { datetime: d.toISOString(), title: d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC') },
    d.toLocaleString());
}

export function duration(a, b) {
  const s = parseTime(a), e = parseTime(b) || (s ? new Date() : null);
  if (!s) return '—';
  const ms = e - s;
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

// ---- the token and the API ----

export class Unauthorized extends Error {}

export function token() { return sessionStorage.getItem(TOKEN_KEY); }

export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }

export function showLogin(reason) {
  sessionStorage.removeItem(TOKEN_KEY);
  current.abort();
  $('#view').replaceChildren();
  $('#login').hidden = false;
  $('#signout').hidden = true;
  const err = $('#login-error');
  err.hidden = !reason;
  err.textContent = reason || '';
  $('#token').value = '';
  $('#token').focus();
}

// fetch() with the token; a 401 shows the form with its reason and throws Unauthorized.
export async function call(path, opts = {}) {
  const t = token();
  // no token: the form, unless it is up already (it may hold the reason a request just got)
  if (!t) { if ($('#login').hidden) showLogin(); throw new Unauthorized('no token'); }
  const res = await fetch(API + path, { ...opts, headers: { ...(opts.headers || {}), Authorization: `Bearer ${t}` } });
  if (res.status === 401) {
    let why = 'The token was refused.';
    try { why = `The token was refused: ${(await res.json()).error.message}`; } catch { /* not JSON */ }
    // requests in flight together all get the 401: the first one's reason stays on the form
    if ($('#login').hidden) showLogin(why);
    throw new Unauthorized(why);
  }
  return res;
}

export async function callJSON(path, opts) {
  const res = await call(path, opts);
  let body = null;
  try { body = await res.json(); } catch { /* an empty or non-JSON body */ }
  if (!res.ok) {
    const msg = body && body.error ? body.error.message : `HTTP ${res.status}`;
    const e = new Error(msg);
    e.status = res.status;
    throw e;
  }
  return body;
}

// ---- the view in place: each route gets an AbortController, aborted when the route changes ----

let current = new AbortController();

// A new view: the last one's requests and streams are aborted. Returns the new view's signal.
export function newView() {
  current.abort();
  current = new AbortController();
  return current.signal;
}

// The signal of the view on screen: aborted when the person goes elsewhere.
export function viewSignal() { return current.signal; }

// An error that is only the view going away (or the token form shown): nothing to say.
export function quiet(e) { return e instanceof Unauthorized || (e && e.name === 'AbortError'); }

export function setView(...children) {
  $('#view').replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

export function showError(e) {
  if (e instanceof Unauthorized || (e && e.name === 'AbortError')) return;
  setView(el('p', { class: 'error', role: 'alert' }, `Error: ${e.message || e}`));
}

// Parses text/event-stream from body, calling onEvent(event, data) for each
// event (data lines joined by "\n"; comments and ids ignored).
export async function readSSE(body, signal, onEvent) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '', event = '', data = [], size = 0;
  const onAbort = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') {
          // "event: end" may come with no data line: dispatched all the same
          if (data.length || event) onEvent(event || 'message', data.join('\n'));
          event = ''; data = []; size = 0;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') event = value;
        else if (field === 'data') { data.push(value); size += value.length; }
      }
      if (size + buf.length > SSE_MAX) throw new Error('an event over 32 MiB');
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
