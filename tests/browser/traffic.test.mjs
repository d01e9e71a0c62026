// A deployment's traffic over time, in real headless Chromium against the
// real ferryd that run.sh started: a deploy step serves version 0.0.1
// (tests/browser/tiny_serve.py behind real HAProxy), requests go through
// its front, then a second run rolls out 0.0.2 by a canary that sends its
// own traffic. The page's charts (requests/s, 5xx rate, p50/p99 per
// version, from GET /deployments/{id}/traffic's 10-second buckets) grow
// while it is open, and the canary's steps and a rollback are drawn as markers; each
// replica's health over the hour is a strip; within the CSP. Screenshots at 1280 and 375 px.
import { writeFileSync } from 'node:fs';
import { URL_BASE, SHOTS, TOKEN, ROOT, test, assert, eq, api, waitRun, launch, signedIn, consoleErrors, done } from './harness.mjs';

const HOME = process.env.FERRY_HOME;
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });

const SAMPLE = `${HOME}/traffic-sample.json`;
writeFileSync(SAMPLE, JSON.stringify({ inputs: [{ name: 'input-0', shape: [1, 3], datatype: 'FP32', data: [1, 2, 3] }] }));
const wf = (canary) => `name: traffic-dep
steps:
  - name: train
    kind: train
    command: [sh, -c, 'echo tiny >"$FERRY_OUTPUT_DIR/model.bin"']
  - name: register
    kind: register
    needs: [train]
    model: trafficm
  - name: deploy
    kind: deploy
    needs: [register]
    model: trafficm
    serve: [/usr/bin/python3, ${ROOT}/tests/browser/tiny_serve.py]
    sample: ${SAMPLE}
    auto_stop: 2h
${canary}`;

async function submit(yaml) {
  const r = await api('POST', '/api/v1/runs', { yaml, filename: 'traffic-dep.yaml' });
  eq(r.status, 201, `submit: ${r.text}`);
  return r.json.id;
}

await test('traffic over time: charts that grow under load, the canary\'s steps as markers', async () => {
  await waitRun(await submit(wf('')), 'succeeded', 60);
  const dep = (await api('GET', '/api/v1/deployments')).json.find((d) => d.model === 'trafficm');
  assert(dep, 'the deployment exists');
  const page = await signedIn(ctx, TOKEN, 'traffic', `#/deployments/${dep.id}`);
  await page.locator('#traffic-over-time h2').waitFor();
  // load: requests through the front (HAProxy) while the page is open, then 0.0.2's canary with its own
  let stop = false;
  const load = (async () => {
    while (!stop) {
      const p = await api('POST', `/api/v1/deployments/${dep.id}/predict`, { inputs: [{ name: 'input-0', shape: [1, 2], datatype: 'FP32', data: [1, 2] }] });
      eq(p.status, 200, `predict: ${p.text}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const rps = page.locator('#traffic-over-time figure[data-chart="rps"]');
  await rps.locator('canvas').waitFor({ timeout: 40000 });
  const first = Number(await rps.getAttribute('data-points'));
  const canaryRun = await submit(wf('    canary: {steps: [50, 100], interval: 2s, min_requests: 5, traffic: {rate: 20/s}}'));
  await waitRun(canaryRun, 'succeeded', 90);
  // the chart moved: later buckets fed in place (no new page), and the canary's steps are marked
  await page.waitForFunction((n) => {
    const f = document.querySelector('#traffic-over-time figure[data-chart="rps"]');
    return f && Number(f.dataset.points) > n && Number(f.dataset.markers) >= 1;
  }, first, { timeout: 40000 });
  stop = true;
  await load;
  const t = (await api('GET', `/api/v1/deployments/${dep.id}/traffic`)).json;
  eq(t.bucket_s, 10, 'buckets of 10 s');
  assert((t.versions['0.0.1'] || []).length >= 1 && (t.versions['0.0.2'] || []).length >= 1,
    `both versions have buckets: ${JSON.stringify(Object.keys(t.versions))}`);
  const b = t.versions['0.0.2'][0];
  assert(b[1] > 0 && b[4] > 0 && b[5] >= b[4], `a bucket: requests, p50 ≤ p99: ${JSON.stringify(b)}`);
  eq(await page.locator('#traffic-over-time canvas').count(), 3, 'requests/s, 5xx rate, response time: three charts');
  // a person's rollback is a marker too
  const marks = Number(await rps.getAttribute('data-markers'));
  const rb = await api('PATCH', `/api/v1/deployments/${dep.id}`, { action: 'rollback' });
  eq(rb.status, 200, `rollback: ${rb.text}`);
  await page.waitForFunction((n) => Number(document.querySelector('#traffic-over-time figure[data-chart="rps"]').dataset.markers) > n,
    marks, { timeout: 40000 }).catch(async (e) => {
    const ev = (await api('GET', `/api/v1/deployments/${dep.id}`)).json.events.map((x) => x.kind);
    throw new Error(`${e.message}: markers ${marks}, the deployment's events: ${ev.join(' ')}`);
  });
  // each replica's health over the hour: 0.0.2's strip starts (the canary's deploy) and turns healthy
  const row2 = page.locator('#replica-health .rh-row[data-version="0.0.2"][data-replica="1"]');
  await row2.locator('.rh-bar.h-healthy').waitFor({ timeout: 20000 });
  eq(await row2.locator('.rh-bar').evaluateAll((bs) => bs.map((b) => b.className.replace('rh-bar h-', '')).join(' ')),
    'starting healthy', "0.0.2's replica: started, then healthy");
  assert(await page.locator('#replica-health .rh-row[data-version="0.0.1"] .rh-bar.h-healthy').count() >= 1, "0.0.1's replica is healthy");
  const wid = await row2.locator('.rh-bar.h-healthy').evaluate((b) => b.getBoundingClientRect().width);
  assert(wid > 0, `the healthy bar has a width (${wid})`);
  assert(/healthy from .* to now/.test(await row2.locator('.rh-bar.h-healthy').getAttribute('title')), 'its title says when');
  await page.screenshot({ path: `${SHOTS}/traffic-1280.png`, fullPage: true });
  await page.setViewportSize({ width: 375, height: 800 });
  await page.waitForTimeout(300);
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  assert(w <= 375, `no horizontal scroll at 375 px (scrollWidth ${w})`);
  await page.screenshot({ path: `${SHOTS}/traffic-375.png`, fullPage: true });
  await api('PATCH', `/api/v1/deployments/${dep.id}`, { action: 'stop' });
  await page.close();
});

await browser.close();
eq(consoleErrors.length, 0, `no console errors or CSP violations: ${consoleErrors.join(' | ')}`);
done();
