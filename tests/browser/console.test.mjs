// The console (/ui/) in real headless Chromium against the real ferryd that
// tests/browser/run.sh started (FERRY_URL, FERRY_API_TOKEN). Prints TAP-like
// lines ("ok N - name") and closes with "browser: N passed, N failed".
// Screenshots of the runs list and a run page (1280 px and 375 px wide) go
// to $FERRY_SHOTS (build/browser/, not committed).
import {
  URL_BASE, TOKEN, SHOTS, test, assert, eq, api, waitRun, launch, watch as watchPage, consoleErrors, done,
} from './harness.mjs';
import { writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// three steps in a line; train waits for GATE (the test makes it once the page has seen the
// run going), so the page sees it running before it succeeds however busy the machine is
const GATE = join(tmpdir(), `ferry-console-gate-${process.pid}`);
const WORKFLOW = `name: console-three
steps:
  - {name: prepare, command: [sh, -c, "echo preparing the data"]}
  - name: train
    needs: [prepare]
    command: [sh, -c, 'while [ ! -e ${GATE} ]; do sleep 0.1; done; for i in 1 2 3; do echo "epoch $i loss 0.$i"; done; echo "{\\"accuracy\\": 0.93}" > "$FERRY_OUTPUT_DIR/metrics.json"; echo trained-marker']
  - {name: report, needs: [train], command: [sh, -c, "echo done"]}
`;

const browser = await launch();
// a route the other half of the console may not have yet: the page says so and falls back
function watch(page, label) {
  watchPage(page, label, (text, at) => text.startsWith('Failed to load resource') && / 404 /.test(text) &&
    ((!dagRoute && at.endsWith('/dag.svg')) || (!streamRoute && at.endsWith('/stream'))));
}

let runId, streamRoute = false, dagRoute = false;
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await ctx.newPage();
watch(page, 'main');

try {
  await test('the console is served without a token, with a strict CSP, nosniff, ETag and 304; /ui → 308; unknown → 404', async () => {
    const r = await fetch(`${URL_BASE}/ui/`, { signal: AbortSignal.timeout(5000) });
    eq(r.status, 200, 'GET /ui/');
    assert(r.headers.get('content-type').startsWith('text/html'), 'text/html');
    const csp = r.headers.get('content-security-policy') || '';
    for (const d of ["default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"]) {
      assert(csp.includes(d), `CSP has ${d}: ${csp}`);
    }
    assert(!csp.includes('unsafe-inline'), 'no unsafe-inline');
    eq(r.headers.get('x-content-type-options'), 'nosniff', 'nosniff');
    eq(r.headers.get('referrer-policy'), 'no-referrer', 'referrer');
    const html = await r.text();
    assert(html.includes('<script type="module" src="app.js">'), 'the page loads app.js as a module');
    assert(!/<script>|<style>|\sstyle=|\son[a-z]+=/.test(html), 'no inline script, style or handler in index.html');
    const js = await fetch(`${URL_BASE}/ui/app.js`);
    assert(js.headers.get('content-type').startsWith('text/javascript'), 'app.js is JavaScript');
    const etag = js.headers.get('etag');
    assert(/^"[0-9a-f]{32}"$/.test(etag), `ETag ${etag}`);
    const again = await fetch(`${URL_BASE}/ui/app.js`, { headers: { 'If-None-Match': etag } });
    eq(again.status, 304, 'If-None-Match → 304');
    eq((await again.text()).length, 0, 'a 304 has no body');
    const redirect = await fetch(`${URL_BASE}/ui`, { redirect: 'manual' });
    eq(redirect.status, 308, '/ui');
    eq(redirect.headers.get('location'), '/ui/', '/ui Location');
    eq((await fetch(`${URL_BASE}/ui/nothing.js`)).status, 404, 'unknown file');
    eq((await fetch(`${URL_BASE}/ui/..%2fapi`)).status, 404, 'no way out of the table');
  });

  await test('the token form, then the runs list shows a submitted run', async () => {
    const sub = await api('POST', '/api/v1/runs', { yaml: WORKFLOW, filename: 'console-three.yaml' });
    eq(sub.status, 201, `POST /runs: ${sub.text}`);
    runId = sub.json.id;
    // whether the stream route exists: its status alone (the body of a live stream never ends)
    const probe = new AbortController();
    const st = await fetch(`${URL_BASE}/api/v1/runs/${runId}/stream`, { headers: { Authorization: `Bearer ${TOKEN}` },
      signal: probe.signal }).then((r) => r.status, () => 0);
    probe.abort();
    streamRoute = st === 200;
    dagRoute = (await api('GET', `/api/v1/runs/${runId}/dag.svg`)).status === 200;
    await page.goto(`${URL_BASE}/ui/`);
    await page.locator('#login').waitFor({ state: 'visible' });
    await page.fill('#token', TOKEN);
    await page.press('#token', 'Enter');
    const row = page.locator(`#runs tr[data-run="${runId}"]`);
    await row.waitFor({ state: 'visible' });
    const cells = await row.locator('td').allInnerTexts();
    eq(cells[0], `#${runId}`, 'run id');
    eq(cells[1], 'console-three', 'workflow');
    assert(/(pending|running|succeeded)/.test(cells[2]) && /[…▶✓]/.test(cells[2]), `state as a word and a symbol: ${cells[2]}`);
    eq(cells[3], 'api', 'trigger');
    const title = await row.locator('time').getAttribute('title');
    assert(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/.test(title), `created in UTC on hover: ${title}`);
    eq(await page.evaluate(() => sessionStorage.getItem('ferry.token')), TOKEN, 'token kept in sessionStorage');
    await page.screenshot({ path: `${SHOTS}/runs-1280.png`, fullPage: true });
  });

  await test('the run page shows every step of a 3-step workflow and its states change live', async () => {
    const requests = [];
    page.on('request', (r) => { if (r.url().includes(`/api/v1/runs/${runId}`)) requests.push(r.url()); });
    await page.click(`#runs tr[data-run="${runId}"] a`);
    await page.locator('#steps tbody tr').first().waitFor();
    const names = await page.locator('#steps tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.step));
    eq(JSON.stringify(names), JSON.stringify(['prepare', 'train', 'report']), 'every step, the unstarted ones too');
    if (dagRoute) {
      for (const s of ['prepare', 'train', 'report']) await page.locator(`#dag g[id="step-${s}"]`).waitFor();
    }
    if (streamRoute) {
      // the run is still going (train waits for GATE): report must turn succeeded without a reload
      const before = await page.locator('#steps tr[data-step="report"] .state').innerText();
      writeFileSync(GATE, '');
      assert(!before.includes('succeeded'), `report not succeeded yet at first: ${before}`);
      await page.locator('#steps tr[data-step="report"] .state-succeeded').waitFor({ timeout: 20000 });
      await page.locator('#live', { hasText: 'over' }).waitFor();
      if (dagRoute) await page.locator('#dag g[id="step-report"].state-succeeded').waitFor();
    } else {
      writeFileSync(GATE, '');
      await page.locator('#live', { hasText: 'unavailable' }).waitFor();
      const seen = requests.length;
      await page.waitForTimeout(2500);
      eq(requests.length, seen, 'no polling when the stream route is missing');
      await waitRun(runId, 'succeeded', 20);
      await page.reload();
      await page.locator('#steps tr[data-step="report"] .state-succeeded').waitFor();
    }
    await page.screenshot({ path: `${SHOTS}/run-1280.png`, fullPage: true });
  });
  writeFileSync(GATE, ''); // whatever happened above: the run goes on for the tests below

  await test('live updates and the DAG through test doubles of the stream and dag.svg routes (where they are missing)', async () => {
    if (streamRoute && dagRoute) return; // the real routes were tested above
    // TEST DOUBLES: until GET /runs/{id}/stream and /dag.svg exist in this daemon, the browser is
    // answered by these stand-ins that follow their contract (event: run with the run JSON, event: end;
    // a Graphviz SVG with <g id="step-NAME" class="node step">), so the page's SSE reader and DAG code run.
    const run = (await api('GET', `/api/v1/runs/${runId}`)).json;
    const early = JSON.parse(JSON.stringify(run));
    early.state = 'running';
    for (const s of early.steps) s.state = s.name === 'prepare' ? 'succeeded' : s.name === 'train' ? 'running' : 'blocked';
    let release;
    const gate = new Promise((r) => { release = r; });
    const p4 = await ctx.newPage();
    watch(p4, 'doubles');
    try {
      if (!streamRoute) {
        await p4.route(`**/api/v1/runs/${runId}/stream`, async (r) => {
          eq(r.request().headers().authorization, `Bearer ${TOKEN}`, 'the stream is asked with the bearer token');
          await gate;
          await r.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' },
            body: `: hello\r\nevent: run\r\ndata: ${JSON.stringify(early)}\r\n\r\nevent: run\ndata: ${JSON.stringify(run)}\n\nevent: end\n\n` });
        });
      }
      if (!dagRoute) {
        const node = (s, y) => `<g id="step-${s}" class="node step" onclick="window.bad=1" style="fill:red"><title>${s}</title><polygon points="0,${y} 100,${y} 100,${y + 30} 0,${y + 30}"/><text x="10" y="${y + 20}">${s}</text></g>`;
        await p4.route(`**/api/v1/runs/${runId}/dag.svg`, (r) => r.fulfill({ status: 200, headers: { 'Content-Type': 'image/svg+xml' },
          body: `<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="200pt" height="200pt" viewBox="0 0 200 200"><script>window.bad=2</script><g id="graph0" class="graph">${node('prepare', 0)}${node('train', 50)}${node('report', 100)}</g></svg>` }));
      }
      // sessionStorage is per tab: a new tab asks for the token again
      await p4.goto(`${URL_BASE}/ui/`);
      await p4.locator('#login').waitFor({ state: 'visible' });
      await p4.evaluate((t) => sessionStorage.setItem('ferry.token', t), TOKEN);
      await p4.goto(`${URL_BASE}/ui/#/runs/${runId}`);
      await p4.locator('#dag g[id="step-train"]').waitFor();
      // a finished run follows no stream: the page shows the run over without asking
      await p4.locator('#live', { hasText: 'over' }).waitFor();
      eq(await p4.evaluate(() => window.bad), undefined, 'no script or handler from the SVG ran');
      eq(await p4.locator('#dag [style], #dag script').count(), 0, 'style attributes and scripts stripped');
      eq(await p4.locator('#dag g[id="step-report"]').getAttribute('class'), 'node step state-succeeded', 'node class from the step state');
      // a run still going: make the run JSON say so, and the stream brings it to succeeded
      await p4.route(`**/api/v1/runs/${runId}`, (r) => r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(early) }));
      await p4.reload();
      await p4.locator('#dag g[id="step-report"].state-blocked').waitFor();
      eq(await p4.locator('#steps tr[data-step="report"] .state').innerText(), '○blocked', 'report blocked at first');
      release();
      await p4.locator('#steps tr[data-step="report"] .state-succeeded').waitFor();
      await p4.locator('#dag g[id="step-report"].state-succeeded').waitFor();
      await p4.locator('#live', { hasText: 'The run is over' }).waitFor();
      await p4.click('#dag g[id="step-train"]');
      await p4.locator('#log', { hasText: 'trained-marker' }).waitFor();
      await p4.screenshot({ path: `${SHOTS}/run-dag-1280.png`, fullPage: true });
    } finally {
      release();
      await p4.close();
    }
  });

  await test('a hostile dag.svg is defused: no script, handler, style, animation or outside link survives', async () => {
    // TEST DOUBLE of dag.svg's body only (the daemon's own SVG never holds these): what the page must
    // make safe if a step name or a future Graphviz ever smuggled any of it in
    const p5 = await ctx.newPage();
    watch(p5, 'hostile');
    try {
      const node = (s, y) => `<g id="step-${s}" class="node step" onclick="window.bad=1" ONMOUSEOVER='window.bad=3' style="fill:red"><title>${s}</title>` +
        `<a xlink:href="https://example.com/x" href="javascript:window.bad=4"><polygon points="0,${y} 100,${y} 100,${y + 30} 0,${y + 30}"/></a>` +
        `<set attributeName="onmouseover" to="window.bad=5"/><animate attributeName="href" to="javascript:window.bad=6"/>` +
        `<text x="10" y="${y + 20}">${s}</text></g>`;
      await p5.route(`**/api/v1/runs/${runId}/dag.svg`, (r) => r.fulfill({ status: 200, headers: { 'Content-Type': 'image/svg+xml' },
        body: `<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="200pt" height="200pt" onload="window.bad=7"><script>window.bad=2</script><style>*{fill:red}</style><foreignObject><div xmlns="http://www.w3.org/1999/xhtml">x</div></foreignObject><g id="graph0" class="graph">${node('prepare', 0)}${node('train', 50)}${node('report', 100)}</g></svg>` }));
      await p5.goto(`${URL_BASE}/ui/`);
      await p5.evaluate((t) => sessionStorage.setItem('ferry.token', t), TOKEN);
      await p5.goto(`${URL_BASE}/ui/#/runs/${runId}`);
      await p5.locator('#dag g[id="step-train"]').waitFor();
      await p5.hover('#dag g[id="step-train"] polygon');
      await p5.click('#dag g[id="step-train"]');
      await p5.locator('#detail-h', { hasText: 'train' }).waitFor();
      eq(await p5.evaluate(() => window.bad), undefined, 'nothing from the SVG ran');
      eq(await p5.locator('#dag script, #dag style, #dag foreignObject, #dag set, #dag animate, #dag [style]').count(), 0,
        'scripts, styles, foreign content and animations removed');
      const left = await p5.evaluate(() => [...document.querySelectorAll('#dag *')].flatMap((n) => [...n.attributes]
        .filter((a) => /^on/i.test(a.name) || (a.localName === 'href' && !a.value.startsWith('#'))).map((a) => `${n.nodeName}@${a.name}`)));
      eq(JSON.stringify(left), '[]', 'no handler or outside link left');
    } finally {
      await p5.close();
    }
  });

  await test('clicking a step shows its attempts, metrics and the tail of its log', async () => {
    await waitRun(runId, 'succeeded', 20);
    await page.click('#steps tr[data-step="train"] button');
    await page.locator('#detail-h', { hasText: 'train' }).waitFor();
    await page.locator('#log', { hasText: 'trained-marker' }).waitFor();
    const log = await page.locator('#log').innerText();
    assert(log.includes('epoch 3 loss 0.3'), `the log: ${log}`);
    const metric = await page.locator('#metrics tr', { hasText: 'accuracy' }).innerText();
    assert(metric.includes('0.93'), `metric row: ${metric}`);
    eq(await page.locator('#attempts tbody tr').count(), 1, 'one attempt');
    assert((await page.locator('#attempts tbody tr').innerText()).includes('succeeded'), 'attempt state');
    // keyboard: the steps are buttons, reachable and activated with Enter
    await page.focus('#steps tr[data-step="prepare"] button');
    await page.keyboard.press('Enter');
    await page.locator('#log', { hasText: 'preparing the data' }).waitFor();
    await page.screenshot({ path: `${SHOTS}/step-1280.png`, fullPage: true });
  });

  await test('a failed attempt with a long reason: the attempts table keeps its Log column in the panel', async () => {
    // one unbroken 400-character word as the last line of the log: the attempt's reason (before: it
    // pushed the Log column out of the panel, behind a horizontal scroll)
    const yaml = `name: console-long-reason
steps:
  - {name: fails, command: [sh, -c, 'printf "%0400d\\\\n" 0 | tr 0 x; exit 3']}
`;
    const sub = await api('POST', '/api/v1/runs', { yaml, filename: 'long-reason.yaml' });
    eq(sub.status, 201, `POST /runs: ${sub.text}`);
    await waitRun(sub.json.id, 'failed', 20);
    await page.goto(`${URL_BASE}/ui/#/runs/${sub.json.id}`);
    await page.click('#steps tr[data-step="fails"] button');
    await page.locator('#attempts tbody tr').waitFor();
    const reason = await page.locator('#attempts td.reason').innerText();
    assert(reason.includes('xxxxxxxxxx'), `the long reason is shown: ${reason.slice(0, 80)}`);
    const fit = await page.evaluate(() => {
      const wrap = document.querySelector('#attempts').closest('.table-wrap');
      const log = document.querySelector('#attempts td.log-cell').getBoundingClientRect();
      return { scroll: wrap.scrollWidth, client: wrap.clientWidth, logRight: log.right, wrapRight: wrap.getBoundingClientRect().right };
    });
    assert(fit.scroll <= fit.client + 1, `no horizontal scroll in the attempts table: ${JSON.stringify(fit)}`);
    assert(fit.logRight <= fit.wrapRight + 1, `the Log cell is inside the panel: ${JSON.stringify(fit)}`);
  });

  await test('a fan-out: the step shows its progress, and its items a page at a time, by state', async () => {
    const yaml = `name: console-fanout
steps:
  - {name: each, foreach: {range: 150}, max_parallel: 16, command: [sh, -c, 'test $((FERRY_ITEM % 50)) -ne 7']}
`;
    const sub = await api('POST', '/api/v1/runs', { yaml, filename: 'fanout.yaml' });
    eq(sub.status, 201, `POST /runs: ${sub.text}`);
    await waitRun(sub.json.id, 'failed', 60);
    await page.goto(`${URL_BASE}/ui/#/runs/${sub.json.id}`);
    const cell = page.locator('#steps tr[data-step="each"] td.num');
    await cell.filter({ hasText: '150/150 items' }).waitFor();
    await page.click('#steps tr[data-step="each"] button');
    await page.locator('#step-items', { hasText: '147 succeeded, 3 failed' }).waitFor();
    eq(await page.locator('#step-items progress').getAttribute('value'), '150', 'the progress bar');
    await page.click('#items-show');
    await page.locator('#items-table tbody tr').first().waitFor();
    eq(await page.locator('#items-table tbody tr').count(), 100, 'the first page');
    await page.click('#items-next');
    await page.locator('#items-table tbody tr[data-item="149"]').waitFor();
    eq(await page.locator('#items-table tbody tr').count(), 50, 'the second page');
    await page.selectOption('#items-state', 'failed');
    await page.locator('#items-table tbody tr[data-item="57"]').waitFor();
    const rows = await page.locator('#items-table tbody tr').evaluateAll((trs) => trs.map((t) => t.dataset.item));
    eq(rows.join(','), '7,57,107', 'the failed ones');
    await page.screenshot({ path: `${SHOTS}/fanout-1280.png`, fullPage: true });
  });

  await test('a bad token shows the form with the error', async () => {
    const c2 = await browser.newContext();
    const p2 = await c2.newPage();
    watch(p2, 'bad-token');
    try {
      await p2.goto(`${URL_BASE}/ui/#/runs`);
      await p2.fill('#token', 'not-the-token');
      await p2.press('#token', 'Enter');
      const err = p2.locator('#login-error');
      await err.waitFor({ state: 'visible' });
      const text = await err.innerText();
      assert(text.includes('refused') && text.includes('bearer token'), `the reason is shown: ${text}`);
      assert(await p2.locator('#login').isVisible(), 'the form is shown again');
      eq(await p2.evaluate(() => sessionStorage.getItem('ferry.token')), null, 'a refused token is forgotten');
    } finally {
      await c2.close();
    }
    // the browser logs the 401 itself as a failed resource load: that one is expected
    for (let i = consoleErrors.length - 1; i >= 0; i--) {
      if (consoleErrors[i].startsWith('bad-token:') && consoleErrors[i].includes('401')) consoleErrors.splice(i, 1);
    }
  });

  await test('readable at 375 px: the list and the run page fit the width', async () => {
    const c3 = await browser.newContext({ viewport: { width: 375, height: 800 }, isMobile: true });
    const p3 = await c3.newPage();
    watch(p3, 'phone');
    try {
      await p3.goto(`${URL_BASE}/ui/`);
      await p3.evaluate((t) => sessionStorage.setItem('ferry.token', t), TOKEN);
      await p3.goto(`${URL_BASE}/ui/#/runs`);
      await p3.reload();
      await p3.locator(`#runs tr[data-run="${runId}"]`).waitFor();
      const over = await p3.evaluate(() => document.documentElement.scrollWidth);
      assert(over <= 375, `no horizontal scroll on the list at 375 px (scrollWidth ${over})`);
      await p3.screenshot({ path: `${SHOTS}/runs-375.png`, fullPage: true });
      await p3.goto(`${URL_BASE}/ui/#/runs/${runId}`);
      await p3.locator('#steps tr[data-step="report"]').waitFor();
      const over2 = await p3.evaluate(() => document.documentElement.scrollWidth);
      assert(over2 <= 375, `no horizontal scroll on the run page at 375 px (scrollWidth ${over2})`);
      await p3.screenshot({ path: `${SHOTS}/run-375.png`, fullPage: true });
    } finally {
      await c3.close();
    }
  });

  await test('the runs list is live: a new run appears on top and its state changes, with no reload and no polling', async () => {
    await page.goto(`${URL_BASE}/ui/#/runs`);
    await page.locator('#live', { hasText: 'Live' }).waitFor();
    const lists = [];
    page.on('request', (r) => { if (/\/api\/v1\/runs\?/.test(r.url())) lists.push(Date.now()); });
    await page.waitForTimeout(2500);
    eq(lists.length, 0, 'nothing read while nothing changes');
    const sub = await api('POST', '/api/v1/runs', { yaml: WORKFLOW.replace('console-three', 'console-live'), filename: 'live.yaml' });
    eq(sub.status, 201, sub.text);
    const row = page.locator(`#runs tbody tr[data-run="${sub.json.id}"]`);
    await row.waitFor({ timeout: 5000 });
    eq(await page.locator('#runs tbody tr').first().getAttribute('data-run'), String(sub.json.id), 'the new run is on top');
    await row.locator('.state-succeeded').waitFor({ timeout: 20000 });
    assert(lists.length <= 12, `the page was read again on changes only, at most once a second (${lists.length} reads)`);
  });

  await test('no CSP violation or script error on any page', async () => {
    eq(consoleErrors.length, 0, `console errors: ${consoleErrors.join(' | ')}`);
  });
} finally {
  await browser.close();
}

console.log(`# stream route: ${streamRoute ? 'yes' : 'no (table fallback tested)'}; dag.svg route: ${dagRoute ? 'yes' : 'no'}`);
rmSync(GATE, { force: true });
done();
