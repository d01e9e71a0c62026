// What every browser test file shares: TAP-like reporting ("ok N - name",
// the closing "browser: N passed, N failed"), assertions, the API as the
// test's own client (FERRY_URL, FERRY_API_TOKEN from run.sh), waiting for a
// run's state, named tokens (ferryd token create, as a person would), the
// browser (Debian's chromium through playwright-core) and a watch on each
// page for console errors (a CSP violation shows up there).
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';

export const URL_BASE = process.env.FERRY_URL;
export const TOKEN = process.env.FERRY_API_TOKEN;
export const SHOTS = process.env.FERRY_SHOTS || 'build/browser';
export const ROOT = process.env.ROOT;
const T0 = Date.now();

let n = 0, passed = 0, failed = 0;
const failures = [];
export const consoleErrors = [];

export async function test(name, fn) {
  n++;
  const t = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok ${n} - ${name} (${((Date.now() - t) / 1000).toFixed(1)}s)`);
  } catch (e) {
    failed++;
    failures.push(name);
    console.log(`not ok ${n} - ${name} (${((Date.now() - t) / 1000).toFixed(1)}s)`);
    for (const line of String(e && e.stack ? e.stack : e).split('\n').slice(0, 12)) console.log(`    # ${line}`);
  }
}

export function assert(cond, msg) { if (!cond) throw new Error(`assertion failed: ${msg}`); }
export function eq(actual, expected, msg) {
  if (actual !== expected) throw new Error(`${msg}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

// The API with a token (the daemon's own by default): {status, json, text, headers}.
export async function api(method, path, body, token = TOKEN) {
  const res = await fetch(URL_BASE + path, {
    method, headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined, signal: AbortSignal.timeout(15000),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text, headers: res.headers };
}

// Polls the API (the test's own check, not the page's) until run id is in state, or throws.
export async function waitRun(id, state, secs) {
  const end = Date.now() + secs * 1000;
  let last;
  while (Date.now() < end) {
    last = await api('GET', `/api/v1/runs/${id}`);
    if (last.json && last.json.state === state) return last.json;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`run ${id} is ${last && last.json ? last.json.state : '?'}, expected ${state}`);
}

export async function waitStep(id, step, state, secs) {
  const end = Date.now() + secs * 1000;
  let s;
  while (Date.now() < end) {
    const r = await api('GET', `/api/v1/runs/${id}`);
    s = r.json && (r.json.steps || []).find((x) => x.name === step);
    if (s && s.state === state) return s;
    await new Promise((r2) => setTimeout(r2, 200));
  }
  throw new Error(`step ${step} of run ${id} is ${s ? s.state : '?'}, expected ${state}`);
}

// A named token made as a person makes one (ferryd token create); the API reads tokens every second.
export async function namedToken(name, role) {
  const t = execFileSync('ferryd', ['token', 'create', name, '--role', role], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  await new Promise((r) => setTimeout(r, 1500));
  return t;
}

export async function launch() {
  return chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'], timeout: 30000 });
}

// Collects a page's console errors and page errors under label (ignore: a predicate for expected ones).
export function watch(page, label, ignore = () => false) {
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const at = (m.location() && m.location().url) || '';
    if (ignore(m.text(), at)) return;
    consoleErrors.push(`${label}: ${m.text()} (${at})`);
  });
  page.on('pageerror', (e) => consoleErrors.push(`${label}: page error: ${e.message}`));
  // generous: a loaded CI machine has been seen 6x slower than this one; a passing wait costs nothing more
  page.setDefaultTimeout(30000);
}

// A page signed in with token (sessionStorage is per tab: set before the app reads it).
export async function signedIn(ctx, token, label, hash = '#/runs') {
  const page = await ctx.newPage();
  watch(page, label);
  await page.goto(`${URL_BASE}/ui/`);
  await page.evaluate((t) => sessionStorage.setItem('ferry.token', t), token);
  await page.goto(`${URL_BASE}/ui/${hash}`);
  await page.reload();
  return page;
}

export function done() {
  console.log(`# took ${((Date.now() - T0) / 1000).toFixed(1)} s`);
  if (failures.length) console.log(`browser: failed: ${failures.join(', ')}`);
  console.log(`browser: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
