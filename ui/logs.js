// Ferry console: a step attempt's log, at any size. What is shown is a
// window of whole lines, [start, end) in bytes of the log file:
//
//   - opening reads the size (HEAD, Content-Length) and then only the last
//     TAIL bytes (GET …/logs?offset=&length=), so a 1 GB log opens as fast
//     as a small one;
//   - "Older lines" reads the CHUNK bytes before `start` (a range again) and
//     puts them in front; the window keeps at most MAX_LINES lines and
//     MAX_BYTES bytes, dropping from the far end (and then it stops following:
//     "Jump to the end" reads the tail again), so memory stays bounded
//     however far back a person pages;
//   - a running attempt is followed: GET …/logs?follow=1&offset=END streams
//     what is written from there, and lines are appended as they arrive (the
//     server ends the stream when the attempt ends);
//   - a line with carriage returns (a progress bar redrawn in place) shows
//     what a terminal would: the text after its last \r; the line still
//     being written is shown as it grows, and replaced when it is complete;
//   - Ferry's own lines (they start "ferry: ") can be shown alone or hidden;
//   - search marks every match in the window, and Enter / Shift+Enter (or the
//     arrows) jump between them;
//   - "Download" fetches the whole log as a file.
//
// Byte offsets are counted on the raw bytes (lines are split at 0x0A before
// decoding), so a range never cuts a UTF-8 sequence that a later read then
// misreads, and paging back lands exactly at the start of a line.

import { el, call, quiet } from './lib.js';

const TAIL = 64 * 1024; // bytes read when a log opens
const CHUNK = 256 * 1024; // bytes read by each "Older lines"
const MAX_LINES = 20000; // lines kept in the window
const MAX_BYTES = 4 * 1024 * 1024; // bytes kept in the window
const FERRY = /^ferry: /;

const dec = new TextDecoder('utf-8', { fatal: false });

// What a terminal shows of a line: CRLF's \r dropped, then the text after the last \r.
function collapse(text) {
  let t = text.endsWith('\r') ? text.slice(0, -1) : text;
  const cr = t.lastIndexOf('\r');
  return cr < 0 ? { text: t, redrawn: false } : { text: t.slice(cr + 1), redrawn: true };
}

// Splits bytes into lines at \n: [{bytes, text, redrawn}] for the complete
// ones, and the bytes after the last \n (an incomplete line) apart.
function splitLines(bytes) {
  const out = [];
  let from = 0;
  for (let i = bytes.indexOf(10); i >= 0; i = bytes.indexOf(10, from)) {
    out.push({ bytes: i + 1 - from, ...collapse(dec.decode(bytes.subarray(from, i))) });
    from = i + 1;
  }
  return { lines: out, rest: bytes.subarray(from) };
}

function concat(a, b) {
  if (!a.length) return b;
  const all = new Uint8Array(a.length + b.length);
  all.set(a);
  all.set(b, a.length);
  return all;
}

async function errorOf(res) {
  try { return (await res.json()).error.message; } catch { return `HTTP ${res.status}`; }
}

export class LogView {
  // runId, step: whose log; attempt: which; running: follow it; signal: the view's (aborted on leaving)
  constructor({ runId, step, attempt, running, signal }) {
    this.base = `/runs/${runId}/steps/${encodeURIComponent(step)}/logs?attempt=${attempt}`;
    this.fileName = `run-${runId}-${step}-attempt-${attempt}.log`;
    this.attempt = attempt;
    this.running = running;
    this.viewSignal = signal;
    this.ctl = new AbortController();
    this.signal = this.ctl.signal;
    this.lines = []; // {bytes, text, redrawn, ferry, node}
    this.start = 0; // byte offset of the first line shown
    this.end = 0; // byte offset after the last complete line shown
    this.bytes = 0; // bytes of the lines shown
    this.size = null; // the log's size when last read
    this.pending = new Uint8Array(0); // a followed line not complete yet
    this.pendingNode = null;
    this.following = false;
    this.query = '';
    this.marks = [];
    this.current = -1;
    this.build();
  }

  build() {
    const id = (s) => `log-${s}`;
    this.pre = el('pre', { class: 'log', id: 'log', tabindex: '0', 'aria-label': `log of attempt ${this.attempt}` });
    this.note = el('p', { class: 'note', id: 'log-note', 'aria-live': 'polite' });
    this.olderBtn = el('button', { type: 'button', id: id('older'), hidden: true, onclick: () => this.older() }, '↑ Older lines');
    this.endBtn = el('button', { type: 'button', id: id('end'), hidden: true, onclick: () => this.open() }, '↓ Jump to the end');
    this.search = el('input', { type: 'search', id: id('search'), placeholder: 'Search the log', spellcheck: 'false',
      'aria-describedby': id('count') });
    this.count = el('span', { class: 'note', id: id('count'), 'aria-live': 'polite' });
    this.filter = el('select', { id: id('filter') },
      el('option', { value: 'all' }, 'all lines'), el('option', { value: 'job' }, "the job's lines"),
      el('option', { value: 'ferry' }, "Ferry's lines"));
    this.download = el('button', { type: 'button', id: id('download'), onclick: () => this.saveAll() }, 'Download');
    this.live = el('span', { class: 'live', id: id('live') });
    let timer = null;
    this.search.addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.find(this.search.value), 150);
    });
    this.search.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') { ev.preventDefault(); this.jump(ev.shiftKey ? -1 : 1); }
      if (ev.key === 'Escape') { this.search.value = ''; this.find(''); }
    });
    this.filter.addEventListener('change', () => {
      this.pre.classList.toggle('only-job', this.filter.value === 'job');
      this.pre.classList.toggle('only-ferry', this.filter.value === 'ferry');
    });
    this.element = el('div', { class: 'logview' },
      el('div', { class: 'log-tools', role: 'toolbar', 'aria-label': 'log tools' },
        el('label', { for: id('search'), class: 'sr-only' }, 'Search the log'), this.search,
        el('button', { type: 'button', 'aria-label': 'previous match', onclick: () => this.jump(-1) }, '↑'),
        el('button', { type: 'button', 'aria-label': 'next match', onclick: () => this.jump(1) }, '↓'),
        this.count,
        el('label', { for: id('filter'), class: 'inline' }, 'Show'), this.filter,
        this.download, this.live),
      this.note, this.olderBtn, this.pre, this.endBtn);
  }

  close() { this.ctl.abort(); }

  say(text) { this.note.textContent = text; }

  // A ranged read: the bytes of [offset, offset+length) and the log's whole size.
  async range(offset, length) {
    const res = await call(`${this.base}&offset=${offset}&length=${length}`, { signal: this.signal });
    if (!res.ok) throw new Error(await errorOf(res));
    const size = Number(res.headers.get('X-Ferry-Log-Size'));
    return { bytes: new Uint8Array(await res.arrayBuffer()), size: Number.isFinite(size) ? size : null };
  }

  // Opens at the tail (again, from "Jump to the end"), then follows a running attempt.
  async open() {
    this.ctl.abort();
    this.ctl = new AbortController();
    this.signal = AbortSignal.any([this.viewSignal, this.ctl.signal]);
    try {
      const h = await call(this.base, { method: 'HEAD', signal: this.signal });
      if (!h.ok) throw new Error(h.status === 404 ? 'this attempt has no log' : `HTTP ${h.status}`);
      const size = Number(h.headers.get('Content-Length') || 0);
      const from = Math.max(0, size - TAIL);
      const { bytes } = await this.range(from, size - from);
      let body = bytes, start = from;
      if (from > 0) {
        // the first line is likely cut: start after its end (a line longer than TAIL is shown cut)
        const nl = bytes.indexOf(10);
        if (nl >= 0 && nl + 1 < bytes.length) { body = bytes.subarray(nl + 1); start = from + nl + 1; }
      }
      const { lines, rest } = splitLines(body);
      this.lines = [];
      this.pre.replaceChildren();
      this.bytes = 0;
      this.start = start;
      this.end = start;
      this.pending = new Uint8Array(0);
      this.pendingNode = null;
      this.size = size;
      this.append(lines);
      if (rest.length) this.setPending(rest);
      this.endBtn.hidden = true;
      this.pre.scrollTop = this.pre.scrollHeight;
      this.summary();
      if (this.query) this.find(this.query);
      if (this.running) this.follow();
    } catch (e) {
      if (quiet(e)) return;
      this.pre.replaceChildren();
      this.say(`No log: ${e.message}`);
    }
  }

  // One element per line: text and its newline, so copying keeps the lines.
  lineNode(l) {
    const cls = ['ln'];
    if (l.ferry) cls.push('ferry');
    if (l.redrawn) cls.push('redrawn');
    return el('span', { class: cls.join(' '), title: l.redrawn ? 'redrawn in place (carriage returns): the last state is shown' : null },
      l.text, '\n');
  }

  // The lines' elements (searched when a search is on), counted into the window's bytes.
  nodesOf(lines) {
    const frag = document.createDocumentFragment();
    for (const l of lines) {
      l.ferry = FERRY.test(l.text);
      l.node = this.lineNode(l);
      if (this.query) this.markLine(l);
      frag.append(l.node);
      this.bytes += l.bytes;
    }
    return frag;
  }

  // Appends complete lines at the end, dropping from the front past the bounds.
  append(lines) {
    if (!lines.length) return;
    const stick = this.atBottom();
    const frag = this.nodesOf(lines);
    for (const l of lines) { this.end += l.bytes; this.lines.push(l); }
    if (this.pendingNode) this.pre.insertBefore(frag, this.pendingNode);
    else this.pre.append(frag);
    let dropped = false;
    while (this.overBounds()) {
      const l = this.lines.shift();
      l.node.remove();
      this.bytes -= l.bytes;
      this.start += l.bytes;
      dropped = true;
    }
    if (dropped && this.query) this.collectMarks();
    this.olderBtn.hidden = this.start === 0;
    if (stick) this.pre.scrollTop = this.pre.scrollHeight;
  }

  // More than the window keeps (one line is always kept, however long).
  overBounds() { return this.lines.length > MAX_LINES || (this.bytes > MAX_BYTES && this.lines.length > 1); }

  // The incomplete last line of a followed log, redrawn as it grows.
  setPending(bytes) {
    this.pending = bytes;
    const l = { bytes: 0, ...collapse(dec.decode(bytes)) };
    l.ferry = FERRY.test(l.text);
    const node = this.lineNode(l);
    node.classList.add('partial');
    if (this.pendingNode) this.pendingNode.replaceWith(node);
    else this.pre.append(node);
    this.pendingNode = node;
  }

  atBottom() { return this.pre.scrollHeight - this.pre.scrollTop - this.pre.clientHeight < 24; }

  summary() {
    const kib = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MiB` : n >= 1024 ? `${Math.ceil(n / 1024)} KiB` : `${n} bytes`);
    const whole = this.size !== null ? Math.max(this.size, this.end + this.pending.length) : this.end;
    if (!whole) { this.say(this.running ? `Attempt ${this.attempt}: nothing written yet.` : `Attempt ${this.attempt}'s log is empty.`); return; }
    const shown = this.start === 0 && this.end + this.pending.length >= whole ? 'all of it'
      : `${this.lines.length} lines (${kib(this.bytes)}) from byte ${this.start}`;
    this.say(`Attempt ${this.attempt}'s log: ${kib(whole)}; shown: ${shown}.`);
  }

  // The CHUNK bytes before the window, in front of it.
  async older() {
    if (this.start === 0) return;
    this.olderBtn.disabled = true;
    try {
      const from = Math.max(0, this.start - CHUNK);
      const { bytes } = await this.range(from, this.start - from);
      let body = bytes, start = from;
      if (from > 0) {
        const nl = bytes.indexOf(10);
        if (nl >= 0 && nl + 1 < bytes.length) { body = bytes.subarray(nl + 1); start = from + nl + 1; }
      }
      const { lines, rest } = splitLines(body);
      if (rest.length) lines.push({ bytes: rest.length, ...collapse(dec.decode(rest)) }); // a line cut by the window's start
      const keepTop = this.pre.scrollHeight - this.pre.scrollTop; // the line read now stays where it is
      this.pre.prepend(this.nodesOf(lines));
      this.lines.unshift(...lines);
      this.start = start;
      // past the bounds, the newest lines go: the window no longer reaches the end
      let cut = false;
      while (this.overBounds()) {
        const l = this.lines.pop();
        l.node.remove();
        this.bytes -= l.bytes;
        this.end -= l.bytes;
        cut = true;
      }
      if (cut) {
        this.stopFollowing('Paged back past what is kept: the newest lines were let go.');
        if (this.pendingNode) { this.pendingNode.remove(); this.pendingNode = null; this.pending = new Uint8Array(0); }
        this.endBtn.hidden = false;
      }
      this.pre.scrollTop = this.pre.scrollHeight - keepTop;
      this.olderBtn.hidden = this.start === 0;
      if (this.query) this.collectMarks();
      this.summary();
    } catch (e) {
      if (!quiet(e)) this.say(`Could not read older lines: ${e.message}`);
    } finally {
      this.olderBtn.disabled = false;
    }
  }

  stopFollowing(why) {
    if (this.followCtl) this.followCtl.abort();
    this.following = false;
    this.live.textContent = '';
    if (why) this.say(why);
  }

  // Streams what is written after the window's end until the attempt ends.
  async follow() {
    if (this.followCtl) this.followCtl.abort();
    this.followCtl = new AbortController();
    const sig = AbortSignal.any([this.signal, this.followCtl.signal]);
    this.following = true;
    this.live.textContent = '● following';
    try {
      const res = await call(`${this.base}&follow=1&offset=${this.end}`, { signal: sig });
      if (!res.ok) throw new Error(await errorOf(res));
      const reader = res.body.getReader();
      let buf = this.pending;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const { lines, rest } = splitLines(concat(buf, value));
        if (lines.length) {
          if (this.pendingNode) { this.pendingNode.remove(); this.pendingNode = null; }
          this.append(lines);
        }
        buf = rest;
        if (rest.length) this.setPending(rest);
        else if (this.pendingNode) { this.pendingNode.remove(); this.pendingNode = null; this.pending = rest; }
        this.size = this.end + rest.length;
      }
      // the attempt is over: an unterminated last line is a line all the same
      if (buf.length) {
        if (this.pendingNode) { this.pendingNode.remove(); this.pendingNode = null; }
        this.pending = new Uint8Array(0);
        this.append([{ bytes: buf.length, ...collapse(dec.decode(buf)) }]);
      }
      this.following = false;
      this.running = false;
      this.live.textContent = '';
      this.summary();
    } catch (e) {
      this.following = false;
      this.live.textContent = '';
      if (!quiet(e)) this.say(`Stopped following: ${e.message}`);
    }
  }

  // The step's attempt ended: the stream ends by itself; nothing else to do.
  ended() { this.running = false; }

  // Search: every match in the window marked, the first one after the view's top made current.
  find(q) {
    this.query = q;
    for (const l of this.lines) if (l.marked || q) this.markLine(l);
    if (this.pendingNode) this.pendingNode.replaceChildren(this.pendingNode.textContent);
    this.collectMarks();
    if (this.marks.length) { this.current = -1; this.jump(1); }
  }

  markLine(l) {
    const q = this.query.toLowerCase();
    const lower = l.text.toLowerCase();
    if (!q || !lower.includes(q)) {
      if (l.marked) { l.node.replaceChildren(l.text, '\n'); l.marked = false; }
      return;
    }
    const parts = [];
    let at = 0;
    for (let i = lower.indexOf(q); i >= 0; i = lower.indexOf(q, at)) {
      if (i > at) parts.push(l.text.slice(at, i));
      parts.push(el('mark', {}, l.text.slice(i, i + q.length)));
      at = i + q.length;
    }
    parts.push(l.text.slice(at), '\n');
    l.node.replaceChildren(...parts);
    l.marked = true;
  }

  collectMarks() {
    this.marks = [...this.pre.querySelectorAll('.ln:not(.partial) mark')];
    this.current = Math.min(this.current, this.marks.length - 1);
    this.countText();
  }

  countText() {
    if (!this.query) { this.count.textContent = ''; return; }
    this.count.textContent = this.marks.length
      ? `${this.current + 1} of ${this.marks.length}${this.start > 0 ? ' (in the lines loaded)' : ''}`
      : `no match${this.start > 0 ? ' in the lines loaded' : ''}`;
  }

  jump(dir) {
    if (!this.marks.length) { this.countText(); return; }
    if (this.current >= 0) this.marks[this.current].classList.remove('current');
    this.current = (this.current + dir + this.marks.length) % this.marks.length;
    const m = this.marks[this.current];
    m.classList.add('current');
    // the pre scrolls, not the page: the match is brought to the middle of the log
    const top = m.offsetTop - this.pre.offsetTop;
    this.pre.scrollTop = Math.max(0, top - this.pre.clientHeight / 2);
    this.countText();
  }

  // The whole log as a file (the browser keeps a large download on disk).
  async saveAll() {
    this.download.disabled = true;
    const old = this.download.textContent;
    this.download.textContent = 'Downloading…';
    try {
      const res = await call(this.base, { signal: this.signal });
      if (!res.ok) throw new Error(await errorOf(res));
      const url = URL.createObjectURL(await res.blob());
      const a = el('a', { href: url, download: this.fileName, hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (e) {
      if (!quiet(e)) this.say(`Download failed: ${e.message}`);
    } finally {
      this.download.disabled = false;
      this.download.textContent = old;
    }
  }
}
