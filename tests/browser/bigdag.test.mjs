// The run page on a big run (500 steps, 10 layers of 50, behind a first
// step that waits for a file): every node of the DAG and every row of the
// table shows its step's state, and keeps showing it as the run goes on
// (the table and the nodes are changed in place, so a row or a node left
// behind would show an old state); a node opens its step from the mouse
// and from the keyboard. make bench (bench_ui) times this page on 2,000
// steps.
import { existsSync, writeFileSync } from 'node:fs';
import {
  URL_BASE, TOKEN, SHOTS, test, assert, eq, api, waitRun, waitStep, launch, signedIn, consoleErrors, done,
} from './harness.mjs';

const LAYERS = 10, WIDTH = 50, STEPS = LAYERS * WIDTH;
const GO = `${process.env.FERRY_HOME || '/tmp'}/bigdag-go-${Date.now()}`;

function workflow() {
  const lines = ['name: bigdag', 'steps:', `  - {name: s00_00, command: [sh, -c, 'while [ ! -e ${GO} ]; do sleep 0.1; done']}`];
  const n = (l, i) => `s${String(l).padStart(2, '0')}_${String(i).padStart(2, '0')}`;
  for (let i = 1; i < WIDTH; i++) lines.push(`  - {name: ${n(0, i)}, needs: [${n(0, 0)}], command: ["true"]}`);
  for (let l = 1; l < LAYERS; l++) {
    for (let i = 0; i < WIDTH; i++) {
      const o = (7 * i + 3) % WIDTH;
      const needs = i % 2 === 1 && o !== i ? `${n(l - 1, i)}, ${n(l - 1, o)}` : n(l - 1, i);
      lines.push(`  - {name: ${n(l, i)}, needs: [${needs}], command: ["true"]}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

// In the page: {state: count} over the DAG's nodes, and over the table's rows (by the badge's word).
function census() {
  const nodes = {}, rows = {};
  for (const g of document.querySelectorAll('#dag g[id^="step-"]')) {
    const c = [...g.classList].filter((x) => x.startsWith('state-'));
    const k = c.length === 1 ? c[0].slice(6) : `classes:${c.join(',')}`;
    nodes[k] = (nodes[k] || 0) + 1;
  }
  for (const tr of document.querySelectorAll('#steps tbody tr')) {
    const k = tr.querySelector('.state').lastChild.textContent;
    rows[k] = (rows[k] || 0) + 1;
  }
  return { nodes, rows };
}

const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
let id;

await test(`a ${STEPS}-step run: every node and row shows its state, and follows it to the end`, async () => {
  const r = await api('POST', '/api/v1/runs', { yaml: workflow() });
  eq(r.status, 201, `POST /runs: ${r.text}`);
  id = r.json.id;
  await waitStep(id, 's00_00', 'running', 30);
  const page = await signedIn(ctx, TOKEN, 'bigdag', `#/runs/${id}`);
  await page.waitForFunction((n) => document.querySelectorAll('#dag g[id^="step-"]').length === n, STEPS);
  await page.waitForSelector('#live:text("Live")');
  // a big run's table waits until asked for (the DAG shows every step): built when opened, then followed live
  eq(await page.evaluate(() => document.querySelectorAll('#steps tbody tr').length), 0, 'no rows before the table is opened');
  await page.click('#steps-box summary');
  await page.waitForFunction((n) => document.querySelectorAll('#steps tbody tr').length === n, STEPS);
  let c = await page.evaluate(census);
  eq(JSON.stringify(c.nodes), JSON.stringify({ running: 1, blocked: STEPS - 1 }), 'the nodes while s00_00 runs');
  eq(JSON.stringify(c.rows), JSON.stringify({ running: 1, blocked: STEPS - 1 }), 'the rows while s00_00 runs');
  eq(await page.getAttribute('#dag g[id="step-s00_00"]', 'aria-label'), 's00_00: running', 'the running node says so');

  writeFileSync(GO, '');
  await waitRun(id, 'succeeded', 120);
  await page.waitForFunction(() => document.querySelector('#live').textContent.includes('over'), null, { timeout: 60000 });
  c = await page.evaluate(census);
  eq(JSON.stringify(c.nodes), JSON.stringify({ succeeded: STEPS }), 'every node, live, at the end');
  eq(JSON.stringify(c.rows), JSON.stringify({ succeeded: STEPS }), 'every row, live, at the end');
  eq(await page.textContent('#steps tr[data-step="s09_49"] td.num'), '1', 'the last row counts its attempt');
  eq(await page.getAttribute('#dag g[id="step-s09_49"]', 'aria-label'), 's09_49: succeeded', 'the last node says so');
  assert(await page.evaluate(() => document.querySelectorAll('#steps tbody tr').length) === STEPS, 'one row per step');
  await page.screenshot({ path: `${SHOTS}/bigdag-run.png` });
  await page.close();
});

await test('a DAG node opens its step from a click and from the keyboard; the selected row is marked', async () => {
  const page = await signedIn(ctx, TOKEN, 'bigdag-detail', `#/runs/${id}`);
  await page.waitForFunction((n) => document.querySelectorAll('#dag g[id^="step-"].state-succeeded').length === n, STEPS);
  await page.click('#steps-box summary');
  await page.click('#dag g[id="step-s05_07"]');
  await page.waitForSelector('#detail-h:text("Step s05_07")');
  await page.waitForSelector('#attempts tbody tr');
  eq(await page.evaluate(() => [...document.querySelectorAll('#steps tr.selected')].map((tr) => tr.dataset.step).join()),
    's05_07', 'the clicked step\'s row, alone, is selected');
  eq(await page.evaluate(() => [...document.querySelectorAll('#dag g.selected')].map((g) => g.id).join()), 'step-s05_07',
    'the clicked node, alone, is marked');
  await page.focus('#dag g[id="step-s09_49"]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#detail-h:text("Step s09_49")');
  eq(await page.evaluate(() => [...document.querySelectorAll('#steps tr.selected')].map((tr) => tr.dataset.step).join()),
    's09_49', 'Enter on a node selects it, and the last row is no longer selected');
  await page.close();
});

await test('no CSP violation or script error on the big run\'s pages', async () => {
  eq(consoleErrors.join('\n'), '', 'console errors');
});

await browser.close();
if (existsSync(GO)) writeFileSync(GO, '');
done();
