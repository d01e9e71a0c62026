// The run page's timeline (ui/timeline.js, GET /runs/{id}/timeline) in real
// headless Chromium against the real ferryd that run.sh started: a step that
// fails its first attempt and succeeds on the retry shows two bars in its
// row, a fan-out of 50 items is one row, a gate's wait is an open bar that
// closes when the gate is continued (the page follows the run's stream, no
// reload), a 210-step run shows its 200 longest steps until "Show all".
// No console error or CSP violation; screenshots at 1280 and 375 px.
import {
  URL_BASE, SHOTS, test, assert, eq, api, waitRun, waitStep, launch, signedIn, consoleErrors, done,
} from './harness.mjs';

const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });

const WF = `name: tl-retry
steps:
  - name: prep
    command: [sh, -c, 'sleep 0.3']
  - name: flaky
    needs: [prep]
    retry: {limit: 1, backoff: 200ms, max_backoff: 200ms}
    command: [sh, -c, 'sleep 0.3; test "$FERRY_ATTEMPT" -ge 2']
  - name: fan
    needs: [prep]
    foreach: {range: 50}
    max_parallel: 10
    command: [sh, -c, 'sleep 0.1']
  - name: a-step-with-a-rather-long-name-that-must-not-overflow
    needs: [prep]
    command: [sh, -c, 'sleep 1']
  - name: approve
    kind: gate
    needs: [flaky, fan]
  - name: after
    needs: [approve]
    command: [sh, -c, 'true']
`;

async function submit(yaml, filename) {
  const r = await api('POST', '/api/v1/runs', { yaml, filename });
  eq(r.status, 201, `submit ${filename}: ${r.text}`);
  return r.json.id;
}

const bars = (page, step, kind) => page.locator(`#timeline .tl-row[data-step="${step}"] .tl-bar.kind-${kind}`);

let page, id;
try {
  id = await submit(WF, 'tl-retry.yaml');
  await waitStep(id, 'approve', 'waiting', 30);

  await test('a retried step shows two bars; a fan-out of 50 is one row; the gate waits, open', async () => {
    page = await signedIn(ctx, process.env.FERRY_API_TOKEN, 'timeline', `#/runs/${id}`);
    await page.locator('#timeline .tl-row[data-step="after"]').waitFor();
    const rows = await page.locator('#timeline .tl-row[data-step]').evaluateAll((rs) => rs.map((r) => r.dataset.step));
    eq(JSON.stringify(rows), JSON.stringify(['prep', 'flaky', 'fan', 'a-step-with-a-rather-long-name-that-must-not-overflow',
      'approve', 'after']), 'one row per step in file order, the 50 items not among them');
    eq(await bars(page, 'flaky', 'attempt').count(), 2, 'the retried step: two attempt bars');
    const [b1, b2] = await bars(page, 'flaky', 'attempt').evaluateAll((bs) => bs.map((b) => ({
      cls: b.className, title: b.title, left: parseFloat(b.style.left), width: parseFloat(b.style.width) })));
    assert(/st-failed/.test(b1.cls) && /attempt 1/.test(b1.title), `the first failed: ${b1.cls} ${b1.title}`);
    assert(/st-succeeded/.test(b2.cls) && /attempt 2/.test(b2.title), `the second succeeded: ${b2.cls} ${b2.title}`);
    assert(b1.left + b1.width <= b2.left + 0.01, `the retry comes after the first attempt (${JSON.stringify([b1, b2])})`);
    assert(/^flaky · attempt 1 · failed · from \+.* · \d/.test(b1.title), `a bar's title says step, attempt, state, start, duration: ${b1.title}`);
    eq(await bars(page, 'prep', 'attempt').count(), 1, 'a step tried once: one bar');
    eq(await page.locator('#timeline .tl-row[data-step="fan"] .tl-count').innerText(), '×50', 'the fan-out row says its 50 items');
    eq(await bars(page, 'fan', 'items').count(), 1, '… and draws them as one bar');
    assert(/50 succeeded/.test(await page.locator('#timeline .tl-row[data-step="fan"] .tl-label').getAttribute('title')),
      'its title counts the items by state');
    eq(await bars(page, 'approve', 'waiting').count(), 1, 'the gate: a waiting-for-a-person bar');
    assert(/\bopen\b/.test(await bars(page, 'approve', 'waiting').getAttribute('class')), '… still open');
    eq(await bars(page, 'after', 'attempt').count(), 0, 'the step after the gate has not run');
    assert(await page.locator('#timeline .tl-ticks .tl-tick').count() >= 2, 'a time axis with ticks');
    assert(/^Total .* · 6 steps · longest: /.test(await page.locator('#timeline-summary').innerText()), 'the total and the longest steps');
    assert(await page.locator('#timeline .tl-legend li').count() >= 5, 'a legend');
    // a step's name opens its panel, as in the DAG
    await page.locator('#timeline .tl-row[data-step="flaky"] .tl-label').click();
    await page.locator('#detail').getByText('flaky').first().waitFor();
    await page.screenshot({ path: `${SHOTS}/timeline-1280.png`, fullPage: true });
  });

  await test('live: continuing the gate closes its bar and the next step gets one, from the stream', async () => {
    const r = await api('POST', `/api/v1/runs/${id}/steps/approve/continue`, {});
    eq(r.status, 200, `continue: ${r.text}`);
    await waitRun(id, 'succeeded', 20);
    // the page's stream brings the run's last state (after's bar may show running first)
    await page.locator('#timeline .tl-row[data-step="after"] .tl-bar.kind-attempt.st-succeeded').waitFor();
    assert(!/\bopen\b/.test(await bars(page, 'approve', 'waiting').getAttribute('class')), 'the wait is over');
    eq(await bars(page, 'after', 'attempt').count(), 1, 'after ran once');
  });

  await test('375 px: the chart scrolls inside its box, names do not overflow', async () => {
    await page.setViewportSize({ width: 375, height: 800 });
    await page.locator('#timeline .tl-row[data-step="flaky"]').waitFor();
    const m = await page.evaluate(() => {
      const box = document.querySelector('#timeline .tl-scroll');
      const name = document.querySelector('#timeline .tl-row[data-step^="a-step"] .tl-name');
      const label = name.closest('.tl-label');
      return { page: document.documentElement.scrollWidth, box: [box.scrollWidth, box.clientWidth],
        name: [name.getBoundingClientRect().right, label.getBoundingClientRect().right] };
    });
    assert(m.page <= 375, `no page-wide horizontal scroll (scrollWidth ${m.page})`);
    assert(m.box[0] > m.box[1], `the chart scrolls sideways in its box (${m.box})`);
    assert(m.name[0] <= m.name[1] + 0.5, `a long name is cut inside its label (${m.name})`);
    const text = await page.locator('#timeline').innerText();
    assert(!/\bnull\b|undefined|\[object|NaN/.test(text), 'no null, undefined, NaN or [object …] written');
    await page.screenshot({ path: `${SHOTS}/timeline-375.png`, fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  await test('a 210-step run: the 200 longest rows until "Show all"', async () => {
    const steps = Array.from({ length: 210 }, (_, i) => `  - name: s${i}\n${i ? `    needs: [s${i - 1}]\n` : ''}    command: [sh, -c, 'true']\n`);
    const big = await submit(`name: tl-big\nsteps:\n${steps.join('')}`, 'tl-big.yaml');
    // its end first: a loaded CI machine ran the chain for a minute, and a page that draws a 210-step
    // run many times a second is slow to take a click (the live page is test 2's)
    await waitRun(big, 'succeeded', 180);
    const p = await signedIn(ctx, process.env.FERRY_API_TOKEN, 'timeline-big', `#/runs/${big}`);
    await p.locator('#timeline-all').waitFor();
    eq(await p.locator('#timeline .tl-row[data-step]').count(), 200, '200 rows shown');
    assert(/200 longest of 210/.test(await p.locator('#timeline .tl-more').innerText()), 'it says so');
    await p.locator('#timeline-all').click();
    await p.locator('#timeline .tl-row[data-step="s209"]').waitFor();
    eq(await p.locator('#timeline .tl-row[data-step]').count(), 210, 'all 210 once asked');
    await p.close();
  });

  await test('no console errors or CSP violations', async () => {
    eq(consoleErrors.length, 0, `console errors: ${consoleErrors.join(' | ')}`);
  });
} finally {
  await browser.close();
}
done();
