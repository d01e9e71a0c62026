// Runs compared, in real headless Chromium against the real ferryd that
// run.sh started: two runs of one workflow with different params (lr), whose
// train step (a real python3 process) writes a loss and an accuracy to
// $FERRY_METRICS_FILE along a curve that depends on lr, and whose evaluate
// step writes its own metrics.json. Ticked in the runs list, "Compare
// selected" opens #/compare: a header a run, the final metrics side by side
// (the difference from the first run, the better value starred, rows that
// differ marked), the params (the lr row marked), one chart a metric with a
// series a run. A model version's "Compare with production's run" opens the
// same page. The page stays within its CSP; screenshots at 1280 and 375 px.
import { writeFileSync } from 'node:fs';
import { URL_BASE, SHOTS, TOKEN, test, assert, eq, api, waitRun, launch, signedIn, consoleErrors, done } from './harness.mjs';

const HOME = process.env.FERRY_HOME;
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });

const SCRIPT = `${HOME}/compare-train.py`;
// the monitor follows the file every 300 ms while the job runs (hang.period) and has no last look
// after it ends: the job waits a second after its last line so every line is read
writeFileSync(SCRIPT, `import json, math, os, time
lr = float(os.environ["FERRY_PARAM_LR"])
with open(os.environ["FERRY_METRICS_FILE"], "a") as out:
    for i in range(200):
        out.write(json.dumps({"step": i, "loss": 2.0 * math.exp(-i * lr) + 0.05, "accuracy": 1 - math.exp(-i * lr)}) + "\\n")
with open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "model.bin"), "w") as f:
    f.write(str(lr))
time.sleep(1)
`);
const EVAL = `${HOME}/compare-eval.py`;
writeFileSync(EVAL, `import json, os
lr = float(os.environ["FERRY_PARAM_LR"])
m = {"accuracy": round(0.8 + lr, 4), "loss": round(0.5 - lr, 4)}
with open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "metrics.json"), "w") as f:
    json.dump(m, f)
`);
const WF = `name: compare-wf
params:
  lr: {type: number, default: 0.01}
  batch: {type: integer, default: 32}
steps:
  - name: train
    kind: train
    command: [python3, ${SCRIPT}]
    hang: {period: 300ms}
  - name: evaluate
    kind: evaluate
    needs: [train]
    command: [python3, ${EVAL}]
  - name: register
    kind: register
    needs: [evaluate]
    model: compare-m
    alias: [production]
`;

async function submit(params) {
  const r = await api('POST', '/api/v1/runs', { yaml: WF, filename: 'compare.yaml', params });
  eq(r.status, 201, `submit: ${r.text}`);
  return r.json.id;
}

let page, a, b;

await test('two runs ticked in the runs list open #/compare: both series, the metric differences, the params that differ', async () => {
  a = await submit({ lr: 0.01 });
  await waitRun(a, 'succeeded', 30);
  b = await submit({ lr: 0.05 });
  await waitRun(b, 'succeeded', 30);
  page = await signedIn(ctx, TOKEN, 'compare', '#/runs');
  const btn = page.locator('#compare-selected');
  await page.locator(`#runs tr[data-run="${b}"] input.pick`).waitFor();
  assert(await btn.isDisabled(), 'Compare selected is off with none ticked');
  await page.check(`#runs tr[data-run="${b}"] input.pick`);
  assert(await btn.isDisabled(), 'and with one');
  await page.check(`#runs tr[data-run="${a}"] input.pick`);
  assert(await btn.isEnabled(), 'on with two');
  await btn.click();
  await page.waitForURL(new RegExp(`#/compare\\?runs=${a},${b}$`));
  // a header a run: the oldest first (the baseline), each a link to its run
  await page.locator('#cmp-runs li').nth(1).waitFor();
  eq(await page.locator('#cmp-runs li').evaluateAll((ls) => ls.map((l) => l.dataset.run).join(',')), `${a},${b}`, 'a header a run, oldest first');
  eq(await page.locator(`#cmp-runs li[data-run="${b}"] a`).getAttribute('href'), `#/runs/${b}`, 'a link to the run');
  assert(/compare-wf/.test(await page.locator('#cmp-runs').innerText()), 'the workflow in the header');
  // final metrics: b's accuracy is higher (better), its loss lower (better); b's cells starred
  const acc = page.locator('#cmp-metrics-table tr[data-metric="accuracy"]');
  const cells = await acc.locator('td').allInnerTexts();
  assert(/^0\.81/.test(cells[0]) && /^0\.85/.test(cells[1]), `accuracy side by side: ${cells.join(' | ')}`);
  assert(/\+0\.04 \(\+4\.9 %\)/.test(cells[1]), `the difference from the first run: ${cells[1]}`);
  eq(await acc.getAttribute('class'), 'differs', 'the row whose values differ is marked');
  eq(await acc.locator('td.best').count(), 1, 'one best value');
  assert(/★/.test(await acc.locator('td').nth(1).innerText()), 'the higher accuracy is the best');
  assert(await acc.locator('td').nth(1).locator('.cmp.better').count() === 1, 'and said better');
  const loss = page.locator('#cmp-metrics-table tr[data-metric="loss"]');
  assert(/★/.test(await loss.locator('td').nth(1).innerText()), 'the lower loss is the best');
  assert(/−0\.04/.test(await loss.locator('td').nth(1).innerText()), 'loss: −0.04');
  // params: lr differs, batch does not
  eq(await page.locator('#cmp-params-table tr[data-param="lr"]').getAttribute('class'), 'differs', 'lr differs');
  eq(await page.locator('#cmp-params-table tr[data-param="batch"]').getAttribute('class'), null, 'batch is the same');
  // curves: one chart a metric, a series a run, drawn by uPlot, the legend naming run and step
  await page.locator('#cmp-curves[data-state="drawn"]').waitFor();
  const fig = page.locator('#cmp-curves figure[data-metric="loss"]');
  eq(await fig.getAttribute('data-series'), '2', 'both runs in the loss chart');
  eq(await page.locator('#cmp-curves figure[data-metric="accuracy"]').getAttribute('data-series'), '2', 'and in the accuracy chart');
  const legend = await fig.locator('.u-legend').innerText();
  assert(legend.includes(`run ${a} · train`) && legend.includes(`run ${b} · train`), `the legend names each run's step: ${legend}`);
  eq(await page.locator('#cmp-curves canvas').count(), 2, 'two charts');
  await page.check('#cmp-log');
  eq(await page.locator('#cmp-curves canvas').count(), 2, 'the log scale redraws the same charts');
  eq(await page.evaluate(() => document.querySelectorAll('script:not([src])').length), 0, 'no inline script');
  await page.screenshot({ path: `${SHOTS}/compare-1280.png`, fullPage: true });
  await page.setViewportSize({ width: 375, height: 800 });
  await page.waitForTimeout(300); // the charts follow their box's width
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  assert(w <= 375, `no horizontal scroll at 375 px (scrollWidth ${w})`);
  const text = await page.locator('#view').innerText();
  assert(!/\bnull\b|undefined|\[object|NaN/.test(text), 'no null, undefined, NaN or [object …] written on the page');
  await page.screenshot({ path: `${SHOTS}/compare-375.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
});

await test("a model version links to its run and compares it with production's run", async () => {
  // b registered last: production is b's version; a's version compares with it
  await page.goto(`${URL_BASE}/ui/#/models/compare-m`);
  const va = page.locator('#versions tr[data-version="0.0.1"]');
  await va.waitFor();
  eq(await va.locator('dl.lineage a').getAttribute('href'), `#/runs/${a}`, 'the version links to the run that made it');
  eq(await va.locator('a.compare-prod').getAttribute('href'), `#/compare?runs=${b},${a}`, "compare with production's run");
  eq(await page.locator('#versions tr[data-version="0.0.2"] a.compare-prod').count(), 0, 'production itself has none');
  await va.locator('a.compare-prod').click();
  await page.locator('#cmp-curves[data-state="drawn"]').waitFor();
  eq(await page.locator('#cmp-runs li').evaluateAll((ls) => ls.map((l) => l.dataset.run).join(',')), `${b},${a}`, 'production first');
});

await test('a page asked for fewer than two runs says what to do', async () => {
  await page.goto(`${URL_BASE}/ui/#/compare?runs=${a}`);
  await page.locator('#compare-none').waitFor();
  await page.close();
});

await browser.close();
eq(consoleErrors.length, 0, `no console errors or CSP violations: ${consoleErrors.join(' | ')}`);
done();
