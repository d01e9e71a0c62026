// Training curves on the step panel, in real headless Chromium against the
// real ferryd that run.sh started: a train step (a real python3 process)
// appends a loss and an accuracy to $FERRY_METRICS_FILE for some 8 s (its
// second half once the test has seen the first), one loss a NaN that its
// watch rule catches. The panel draws one uPlot chart
// a metric, grows them while the step runs, marks the NaN and the rule
// that fired, and offers a log scale and smoothing; the page stays within
// its CSP (uPlot is the daemon's own asset). Screenshots at 1280 and 375 px.
import { writeFileSync } from 'node:fs';
import { URL_BASE, SHOTS, TOKEN, test, assert, eq, api, waitRun, launch, signedIn, consoleErrors, done } from './harness.mjs';

const HOME = process.env.FERRY_HOME;
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });

// the second half is written once the test has seen the first (the go file): the curve grows while
// the page is open however slow the machine (a loaded CI machine opened the panel after all 80)
const SCRIPT = `${HOME}/curves-train.py`;
const GO = `${HOME}/curves-go`;
writeFileSync(SCRIPT, `import json, math, os, time
out = open(os.environ["FERRY_METRICS_FILE"], "a")
for i in range(80):
    while i == 40 and not os.path.exists(${JSON.stringify(GO)}):
        time.sleep(0.1)
    loss = float("nan") if i == 40 else 2.0 * math.exp(-i / 20) + 0.05
    out.write(json.dumps({"step": i * 10, "loss": loss, "accuracy": 1 - math.exp(-i / 25)}) + "\\n")
    out.flush()
    time.sleep(0.1)
`);
const WF = `name: curves
steps:
  - name: train
    kind: train
    command: [python3, ${SCRIPT}]
    hang: {period: 300ms, warmup: 5m}
    watch: {loss: [nan_or_inf]}
`;

await test('training curves appear, grow while the step writes metrics, and mark a NaN', async () => {
  const sub = await api('POST', '/api/v1/runs', { yaml: WF, filename: 'curves.yaml' });
  eq(sub.status, 201, `submit: ${sub.text}`);
  const id = sub.json.id;
  const page = await signedIn(ctx, TOKEN, 'curves', `#/runs/${id}`);
  await page.locator('#dag g[id="step-train"]').waitFor();
  await page.click('#dag g[id="step-train"]');
  const loss = page.locator('#curves figure[data-metric="loss"]');
  await loss.locator('canvas').waitFor();
  await page.locator('#curves figure[data-metric="accuracy"] canvas').waitFor();
  const first = Number(await loss.getAttribute('data-points'));
  // the panel of the running attempt, marked: the same one shows the attempt once it ended (a new,
  // empty one until its answer came made the charts blink out, and the watch list was not there)
  await page.evaluate(() => { document.querySelector('#monitor').dataset.mark = 'running'; });
  writeFileSync(GO, '');
  // while it runs, the chart is fed again (every 2 s): more points without a new page
  await page.waitForFunction((n) => {
    const f = document.querySelector('#curves figure[data-metric="loss"]');
    return f && Number(f.dataset.points) > n;
  }, first, { timeout: 20000 });
  const later = Number(await loss.getAttribute('data-points'));
  assert(later > first, `the loss curve grew while the step ran (${first} → ${later} points)`);
  await waitRun(id, 'succeeded', 60);
  // the last read after the end: every value, the NaN said and the rule that fired
  await page.waitForFunction(() => {
    const c = document.querySelector('#curves figure[data-metric="loss"] figcaption');
    return c && /80 values/.test(c.textContent);
  }).catch(async (e) => { throw new Error(`${e.message}; the panel says: ${await page.locator("#monitor").innerText()}; errors: ${consoleErrors.join(" | ")}`); });
  eq(await page.evaluate(() => document.querySelector('#monitor').dataset.mark), 'running',
    'the running attempt\'s panel and charts stay when it ends');
  const caption = await loss.locator('figcaption').innerText();
  assert(/1 not a finite number/.test(caption), `the NaN is said: ${caption}`);
  assert(/watchpoint fired/.test(caption), `the fired rule is said: ${caption}`);
  eq(await page.locator('#watch li.fired').count(), 1, 'the nan_or_inf rule is listed as fired');
  eq(await page.locator('#curves canvas').count(), 2, 'one chart a metric, built once');
  // log scale and smoothing redraw the same charts
  await page.check('#curves-log');
  await page.locator('#curves-smooth').fill('0.6');
  eq(await page.locator('#curves-smooth-value').innerText(), '0.6', 'the smoothing shown');
  eq(await page.locator('#curves canvas').count(), 2, 'still one chart a metric');
  // the log scale is the curves': the utilization chart keeps its linear one (uPlot's y axis labels)
  const utilTop = await page.evaluate(() => document.querySelector('#util-chart .u-wrap') !== null);
  assert(utilTop, 'the utilization chart is drawn by uPlot too');
  // uPlot is the daemon's own asset, loaded under the CSP (no inline style or script)
  const inline = await page.evaluate(() => [...document.querySelectorAll('script:not([src])')].length);
  eq(inline, 0, 'no inline script');
  await page.screenshot({ path: `${SHOTS}/curves-1280.png`, fullPage: true });
  await page.setViewportSize({ width: 375, height: 800 });
  await page.waitForTimeout(300); // the charts follow their box's width
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  assert(w <= 375, `no horizontal scroll at 375 px (scrollWidth ${w})`);
  await page.screenshot({ path: `${SHOTS}/curves-375.png`, fullPage: true });
  await page.close();
});

await browser.close();
eq(consoleErrors.length, 0, `no console errors or CSP violations: ${consoleErrors.join(' | ')}`);
done();
