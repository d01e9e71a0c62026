// The console's Models, Deployments and Schedules pages in real headless
// Chromium against the real ferryd that run.sh started. The data is made as
// a person makes it: model versions registered by workflow runs (a register
// step after an evaluate step's metrics), a deployment by a deploy step
// (real replicas behind real HAProxy; the replica is tests/browser/
// tiny_serve.py, a stand-in model server, since the digits server needs
// scikit-learn), schedules by POST /api/v1/schedules (one ticking every
// second, so the tick history is real), a data trigger by registering a
// workflow that declares one. Screenshots at 1280 and 375 px to $FERRY_SHOTS.
import { writeFileSync, mkdirSync } from 'node:fs';
import { execSync } from 'node:child_process';
import {
  URL_BASE, SHOTS, ROOT, test, assert, eq, api, waitRun, namedToken, launch, signedIn, watch, consoleErrors, done,
} from './harness.mjs';

const HOME = process.env.FERRY_HOME;
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });

// two workflows registering versions of one model: different metrics (one only in each) and data fingerprints
const regWf = (name, metrics, data) => `name: ${name}
steps:
  - name: train
    kind: train
    command: [sh, -c, 'echo ${name} >"$FERRY_OUTPUT_DIR/model.bin"; echo "{\\"data_fingerprint\\": \\"sha256:${data}\\"}" >"$FERRY_OUTPUT_DIR/outputs.json"']
  - name: evaluate
    kind: evaluate
    needs: [train]
    command: [sh, -c, 'echo "${JSON.stringify(JSON.stringify(metrics)).slice(1, -1)}" >"$FERRY_OUTPUT_DIR/metrics.json"']
  - name: register
    kind: register
    needs: [evaluate]
    model: pages-m
    alias: [production]
`;

const SAMPLE = `${HOME}/pages-sample.json`;
writeFileSync(SAMPLE, JSON.stringify({ inputs: [{ name: 'input-0', shape: [1, 3], datatype: 'FP32', data: [1, 2, 3] }] }));
const DEPLOY_WF = `name: pages-dep
steps:
  - name: train
    kind: train
    command: [sh, -c, 'echo tiny >"$FERRY_OUTPUT_DIR/model.bin"']
  - name: register
    kind: register
    needs: [train]
    model: tiny
  - name: deploy
    kind: deploy
    needs: [register]
    model: tiny
    serve: [/usr/bin/python3, ${ROOT}/tests/browser/tiny_serve.py]
    sample: ${SAMPLE}
    auto_stop: 2h
`;

async function submit(yaml, filename) {
  const r = await api('POST', '/api/v1/runs', { yaml, filename });
  eq(r.status, 201, `submit ${filename}: ${r.text}`);
  return r.json.id;
}

async function register(yaml, filename, workdir) {
  const r = await api('POST', '/api/v1/workflows', { yaml, filename, workdir });
  assert(r.status === 201 || r.status === 200, `register ${filename}: ${r.status} ${r.text}`);
}

// no horizontal page scroll at 375 px, then the screenshot
async function narrow(page, hash, shot, ready) {
  await page.setViewportSize({ width: 375, height: 800 });
  await page.goto(`${URL_BASE}/ui/${hash}`);
  await page.locator(ready).first().waitFor();
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  assert(w <= 375, `${hash}: no horizontal scroll at 375 px (scrollWidth ${w})`);
  const text = await page.locator('#view').innerText();
  const bad = text.match(/.{0,60}(\bnull\b|undefined|\[object|NaN).{0,60}/);
  assert(!bad, `${hash}: no null, undefined, NaN or [object …] written on the page: …${bad && bad[0]}…`);
  await page.screenshot({ path: `${SHOTS}/${shot}-375.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
}

const rowText = (page, sel) => page.locator(sel).innerText();

let page, viewer, run1, run2, depRun, every, dst;
try {
  // what takes time starts first: the every-second schedule ticks while the rest runs
  await register('name: pages-tick\nsteps:\n  - {name: s, command: [sh, -c, "true"]}\n', 'pages-tick.yaml', HOME);
  every = (await api('POST', '/api/v1/schedules', { workflow: 'pages-tick', name: 'every', cron: '* * * * * *', timezone: 'UTC', concurrency: 'forbid' })).json;
  assert(every && every.id, 'the every-second schedule was made');
  depRun = await submit(DEPLOY_WF, 'pages-dep.yaml');
  run1 = await submit(regWf('pages-reg-a', { accuracy: 0.81, loss: 0.5, recall: 0.7 }, 'aaaa1111'), 'pages-reg-a.yaml');
  await waitRun(run1, 'succeeded', 20);
  run2 = await submit(regWf('pages-reg-b', { accuracy: 0.9, loss: 0.3, f1: 0.88 }, 'bbbb2222'), 'pages-reg-b.yaml');
  await waitRun(run2, 'succeeded', 20);
  viewer = await namedToken('pages-viewer', 'viewer');

  await test('models list: the model with its latest version, aliases and created time', async () => {
    page = await signedIn(ctx, process.env.FERRY_API_TOKEN, 'operator', '#/models');
    const row = page.locator('#models tr[data-model="pages-m"]');
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    eq(cells[1], '0.0.2', 'latest version');
    eq(cells[2], '2', 'two versions');
    eq(cells[3], 'production → 0.0.2', 'the alias moved to the newest');
    assert(await row.locator('td time').count() === 1, 'created as a time');
    eq(await page.locator('.top nav a[aria-current="page"]').innerText(), 'Models', 'the nav marks the section');
    await page.screenshot({ path: `${SHOTS}/models-1280.png`, fullPage: true });
    await row.locator('a').click();
    await page.waitForURL(/#\/models\/pages-m$/);
  });

  await test('a model: versions with metrics, lineage (run link, workflow hash, data fingerprint) and aliases', async () => {
    const v1 = (await api('GET', '/api/v1/models/pages-m/versions/0.0.1')).json;
    const r1 = page.locator('#versions tr[data-version="0.0.1"]');
    await r1.waitFor();
    const m = await r1.locator('td.metrics dl').innerText();
    assert(/accuracy\s+0\.81/.test(m) && /loss\s+0\.5/.test(m) && /recall\s+0\.7/.test(m), `0.0.1's metrics: ${m}`);
    eq(await r1.locator('a[href^="#/runs/"]').getAttribute('href'), `#/runs/${run1}`, 'lineage: the run');
    const lin = await r1.locator('dl.lineage').innerText();
    assert(lin.includes(v1.lineage.workflow_hash.replace(/^sha256:/, '').slice(0, 12)), `lineage: the workflow hash (${lin})`);
    assert(lin.includes('aaaa1111'), `lineage: the data fingerprint (${lin})`);
    eq((await r1.locator('td').nth(0).innerText()).trim(), '—', '0.0.1 has no alias now');
    const r2 = page.locator('#versions tr[data-version="0.0.2"]');
    eq((await r2.locator('td').nth(0).innerText()).trim(), 'production', '0.0.2 holds production');
    assert((await r2.locator('dl.lineage').innerText()).includes('bbbb2222'), '0.0.2: its own data fingerprint');
    eq(await page.locator('#versions tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.version).join(',')), '0.0.2,0.0.1', 'newest first');
  });

  await test('compare two versions: the union of metric names, B − A with better/worse in words', async () => {
    eq(await page.locator('#cmp-a').inputValue(), '0.0.1', 'A: the older by default');
    eq(await page.locator('#cmp-b').inputValue(), '0.0.2', 'B: the newest');
    const rows = await page.locator('#compare-table tbody tr').evaluateAll((rs) => rs.map((r) =>
      [...r.children].map((c) => c.innerText.trim()).join(' | ')));
    eq(JSON.stringify(rows), JSON.stringify([
      'accuracy | 0.81 | 0.9 | +0.09 ▲ better',
      'f1 | — | 0.88 | only in B',
      'loss | 0.5 | 0.3 | −0.2 ▼ better',
      'recall | 0.7 | — | only in A',
    ]), 'the comparison (loss: lower is better)');
    // swapped: the same figures, the other way
    await page.selectOption('#cmp-a', '0.0.2');
    await page.selectOption('#cmp-b', '0.0.1');
    eq(await rowText(page, '#compare-table tr[data-metric="accuracy"] td:last-child'), '−0.09 ▼ worse', 'accuracy down is worse');
    eq(await rowText(page, '#compare-table tr[data-metric="loss"] td:last-child'), '+0.2 ▲ worse', 'loss up is worse');
    await page.selectOption('#cmp-a', '0.0.1');
    await page.selectOption('#cmp-b', '0.0.2');
    await page.screenshot({ path: `${SHOTS}/model-1280.png`, fullPage: true });
    await narrow(page, '#/models/pages-m', 'model', '#compare-table');
    await narrow(page, '#/models', 'models', '#models');
  });

  await test('deployments: the deploy step\'s deployment listed, its version, weight, replica health and countdown', async () => {
    await waitRun(depRun, 'succeeded', 40);
    const dep = (await api('GET', '/api/v1/deployments')).json.find((d) => d.model === 'tiny');
    assert(dep, 'the deployment exists');
    await page.goto(`${URL_BASE}/ui/#/deployments`);
    const row = page.locator(`#deployments tr[data-deployment="${dep.id}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    eq(cells[1], 'tiny', 'model');
    assert(/running/.test(cells[2]), `state: ${cells[2]}`);
    eq(cells[3], '0.0.1 100%', 'traffic');
    await page.screenshot({ path: `${SHOTS}/deployments-1280.png`, fullPage: true });
    await row.locator('a').click();
    await page.waitForURL(new RegExp(`#/deployments/${dep.id}$`));
    const v = page.locator('#dep-versions tr[data-version="0.0.1"]');
    await v.waitFor();
    eq(await v.locator('td.weight').innerText(), '100%', 'weight');
    const vt = await v.innerText();
    assert(vt.includes('1 of 1 healthy') && /#1 ✓\s*healthy · port \d+ on \S+/.test(vt), `replica health and where it runs: ${vt}`);
    assert(!/null|undefined|\[object/.test(await page.locator('#view').innerText()), 'no null, undefined or [object …] written on the page');
    // the countdown ticks in the browser, from the deadline (2 h ahead)
    const c1 = await page.locator('#countdown').innerText();
    assert(/^1 h 5\d min \d\d s$/.test(c1), `countdown near 2 h: ${c1}`);
    await page.waitForFunction((c) => document.querySelector('#countdown').textContent !== c, c1, { timeout: 3000 });
    // live traffic: predictions through the front (HAProxy), then the page's next reads of its counters
    for (let i = 0; i < 30; i++) {
      const p = await api('POST', `/api/v1/deployments/${dep.id}/predict`, { inputs: [{ name: 'input-0', shape: [1, 2], datatype: 'FP32', data: [1, 2] }] });
      eq(p.status, 200, `predict ${i}: ${p.text}`);
      eq(p.json.response.model_version, '0.0.1', 'answered by 0.0.1');
    }
    const lr = page.locator('#live tr[data-version="0.0.1"]');
    // the first read that counts them: requests/s over the interval that saw them is above 0
    const seen = await page.waitForFunction(() => {
      const row = document.querySelector('#live tr[data-version="0.0.1"]');
      const m = row && row.querySelector('td.total').textContent.match(/^(\d+) \(0 5xx\)$/);
      return m && Number(m[1]) >= 30 ? row.querySelector('td.rps').textContent : null;
    }, null, { timeout: 8000, polling: 50 });
    const rps = await seen.jsonValue();
    assert(/^\d+\.\d$/.test(rps) && Number(rps) > 0, `requests/s over the interval with the 30 requests: ${rps}`);
    const apiStats = (await api('GET', `/api/v1/deployments/${dep.id}`)).json.stats.versions['0.0.1'];
    assert(apiStats.requests >= 30, `the API counts the requests: ${JSON.stringify(apiStats)}`);
    const errCell = await lr.locator('td.err').innerText();
    assert(errCell === '0%' || errCell === '—', `no 5xx: ${errCell}`);
    assert(/ ms$/.test(await lr.locator('td.rtime').innerText()), 'a mean response time');
    // p50 and p99 over the last minute, from the proxy's per-request log (GET's live)
    await page.waitForFunction(() => / ms$/.test(document.querySelector('#live tr[data-version="0.0.1"] td.p99').textContent),
      null, { timeout: 8000, polling: 100 });
    assert(/ ms$/.test(await lr.locator('td.p50').innerText()), 'a live p50');
    const live = (await api('GET', `/api/v1/deployments/${dep.id}`)).json.live['0.0.1'];
    assert(live && live.requests >= 30, `the API's live figures count them: ${JSON.stringify(live)}`);
    await page.locator('#haproxy summary').click();
    eq(await page.locator('#haproxy tbody tr').count(), 1, 'HAProxy applies one server');
    await page.screenshot({ path: `${SHOTS}/deployment-1280.png`, fullPage: true });
  });

  await test('deployment actions: Extend moves the deadline, Stop and Start change the state, each said in the live region', async () => {
    const id = page.url().match(/deployments\/(\d+)/)[1];
    const before = (await api('GET', `/api/v1/deployments/${id}`)).json;
    await page.selectOption('#extend-hours', '1h');
    await page.click('#extend');
    await page.locator('#action-result.ok', { hasText: 'Extend deployment tiny by 1h: done' }).waitFor();
    const after = (await api('GET', `/api/v1/deployments/${id}`)).json;
    const moved = (Date.parse(after.deadline) - Date.parse(before.deadline)) / 1000;
    assert(Math.abs(moved - 3600) < 5, `the deadline moved by 1 h (${moved} s)`);
    assert(/^2 h 5\d min \d\d s$/.test(await page.locator('#countdown').innerText()), 'the countdown shows the new deadline');
    eq(await page.locator('#action-result').getAttribute('aria-live'), 'polite', 'the result region is live');
    await page.click('#dep-stop');
    await page.locator('#action-result.ok', { hasText: 'Stop deployment tiny: done' }).waitFor();
    eq((await api('GET', `/api/v1/deployments/${id}`)).json.state, 'stopped', 'the API says stopped');
    assert(/stopped/.test(await page.locator('#view h1').innerText()), 'the page says stopped');
    await page.locator('#dep-start').waitFor();
    assert(await page.locator('#dep-stop').isHidden(), 'no Stop on a stopped deployment');
    await page.click('#dep-start');
    await page.locator('#action-result.ok', { hasText: 'Start deployment tiny: done' }).waitFor();
    eq((await api('GET', `/api/v1/deployments/${id}`)).json.state, 'running', 'the API says running');
    // the replica started again: Refresh reads its health once the API has it healthy
    const end = Date.now() + 15000;
    while (Date.now() < end && (await api('GET', `/api/v1/deployments/${id}`)).json.versions[0].replica_list[0].health !== 'healthy') {
      await new Promise((r) => setTimeout(r, 200));
    }
    await page.click('#dep-refresh');
    await page.locator('#dep-versions tr[data-version="0.0.1"]', { hasText: '1 of 1 healthy' }).waitFor();
    await narrow(page, `#/deployments/${id}`, 'deployment', '#dep-versions');
    await narrow(page, '#/deployments', 'deployments', '#deployments');
  });

  await test('a replica killed and restarted: ✓ healthy, its last error said as what happened before the restart, not in red', async () => {
    const id = (await api('GET', '/api/v1/deployments')).json.find((d) => d.model === 'tiny').id;
    const rep = () => api('GET', `/api/v1/deployments/${id}`).then((r) => r.json.versions[0].replica_list[0]);
    const port = (await rep()).port;
    const pid = execSync(`ss -ltnpH 'sport = :${port}'`).toString().match(/pid=(\d+)/);
    assert(pid, `a process listens on the replica's port ${port}`);
    process.kill(Number(pid[1]), 'SIGKILL');
    const end = Date.now() + 30000;
    let r = await rep();
    while (Date.now() < end && !(r.restarts >= 1 && r.health === 'healthy')) {
      await new Promise((ok) => setTimeout(ok, 200));
      r = await rep();
    }
    assert(r.restarts >= 1 && r.health === 'healthy' && r.last_error, `restarted and healthy, its error kept: ${JSON.stringify(r)}`);
    await page.goto(`${URL_BASE}/ui/#/deployments/${id}`);
    const li = page.locator('#dep-versions li[data-replica="1"]');
    await li.filter({ hasText: 'before its last restart' }).waitFor({ timeout: 10000 });
    const text = await li.innerText();
    assert(/✓\s*healthy/.test(text) && text.includes(`before its last restart: ${r.last_error}`), `the replica's line: ${text}`);
    eq(await li.locator('.error').count(), 0, 'no red error beside a healthy replica');
  });

  await test('a viewer: the deployment\'s buttons are disabled, and a forced one shows the API\'s 403 message', async () => {
    const id = (await api('GET', '/api/v1/deployments')).json.find((d) => d.model === 'tiny').id;
    const c2 = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    // the forced click's 403 is logged by Chromium as a failed load: expected here, and only that one
    const vp = await c2.newPage();
    watch(vp, 'viewer', (text, at) => /status of 403/.test(text) && at.endsWith(`/api/v1/deployments/${id}`));
    await vp.goto(`${URL_BASE}/ui/`);
    await vp.evaluate((t) => sessionStorage.setItem('ferry.token', t), viewer);
    await vp.goto(`${URL_BASE}/ui/#/deployments/${id}`);
    await vp.reload();
    await vp.locator('#dep-stop').waitFor();
    assert(await vp.locator('#dep-stop').isDisabled(), 'Stop is disabled for a viewer');
    await vp.locator('#role-note').waitFor();
    await vp.evaluate(() => { const b = document.querySelector('#dep-stop'); b.disabled = false; b.click(); });
    await vp.locator('#action-result.error', { hasText: 'refused:' }).waitFor();
    const msg = await vp.locator('#action-result').innerText();
    const direct = await api('PATCH', `/api/v1/deployments/${id}`, { action: 'stop' }, viewer);
    eq(direct.status, 403, 'the API refuses a viewer');
    assert(msg.includes(direct.json.error.message), `the page shows the API's message: ${msg}`);
    eq((await api('GET', `/api/v1/deployments/${id}`)).json.state, 'running', 'still running');
    await c2.close();
  });

  await test('a schedule: next fire times with the API\'s DST notes, pause and resume from the page', async () => {
    // Sundays in March at 02:30 Berlin: the last one falls in the spring gap
    const r = await api('POST', '/api/v1/schedules', { workflow: 'pages-tick', name: 'dst', cron: '30 2 * 3 0', timezone: 'Europe/Berlin' });
    eq(r.status, 201, `POST /schedules: ${r.text}`);
    dst = r.json;
    const shown = (await api('GET', `/api/v1/schedules/${dst.id}`)).json;
    const notes = shown.next.filter((n) => n.note);
    assert(shown.next.length === 10 && notes.length >= 1, `the API gives 10 next times, one with a DST note: ${JSON.stringify(shown.next)}`);
    await page.goto(`${URL_BASE}/ui/#/schedules`);
    const row = page.locator(`#schedules tr[data-schedule="${dst.id}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    eq(cells[0], 'pages-tick / dst', 'name');
    eq(cells[1], '30 2 * 3 0', 'cron');
    eq(cells[2], 'Europe/Berlin', 'zone');
    assert(/active/.test(cells[3]), `not paused: ${cells[3]}`);
    eq(await row.locator('td:nth-child(5) time').getAttribute('datetime'), new Date(shown.next[0].at).toISOString(), 'next fire');
    await row.locator('a').click();
    await page.locator('#next tbody tr').first().waitFor();
    const rows = await page.locator('#next tbody tr').evaluateAll((rs) => rs.map((x) => ({
      at: x.querySelector('time').getAttribute('datetime'), local: x.children[1].innerText, note: x.children[2].innerText })));
    eq(rows.length, 10, 'ten next times');
    for (let i = 0; i < 10; i++) {
      eq(rows[i].at, new Date(shown.next[i].at).toISOString(), `next ${i}: when`);
      eq(rows[i].local, shown.next[i].local, `next ${i}: wall clock`);
      eq(rows[i].note, shown.next[i].note ? `⚠ ${shown.next[i].note}` : '—', `next ${i}: DST note`);
    }
    eq(await page.locator('#next tr.dst').count(), notes.length, 'the DST rows are marked');
    await page.click('#pause');
    await page.locator('#action-result.ok', { hasText: 'Pause schedule pages-tick/dst: done' }).waitFor();
    eq((await api('GET', `/api/v1/schedules/${dst.id}`)).json.paused, true, 'the API shows paused');
    assert(/paused/.test(await page.locator('#view h1').innerText()), 'the heading says paused');
    await page.locator('#next-paused').waitFor();
    eq(await page.locator('#pause').innerText(), '▶ Resume', 'the button resumes now');
    await page.click('#pause');
    await page.locator('#action-result.ok', { hasText: 'Resume schedule pages-tick/dst: done' }).waitFor();
    eq((await api('GET', `/api/v1/schedules/${dst.id}`)).json.paused, false, 'the API shows resumed');
    await page.screenshot({ path: `${SHOTS}/schedule-1280.png`, fullPage: true });
  });

  await test('tick history: the every-second schedule\'s real ticks, paged with the before cursor', async () => {
    // at least 21 ticks: a page of 20 and more behind it
    const end = Date.now() + 25000;
    let ticks = [];
    while (Date.now() < end) {
      ticks = (await api('GET', `/api/v1/schedules/${every.id}?limit=100`)).json.ticks;
      if (ticks.length >= 22) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    assert(ticks.length >= 22, `ticks so far: ${ticks.length}`);
    // paused from the list page, so the history holds still
    await page.goto(`${URL_BASE}/ui/#/schedules`);
    await page.click(`#pause-s${every.id}`);
    await page.locator('#action-result.ok', { hasText: 'Pause schedule pages-tick/every: done' }).waitFor();
    await page.locator(`#schedules tr[data-schedule="${every.id}"] td.paused`, { hasText: 'paused' }).waitFor();
    eq((await api('GET', `/api/v1/schedules/${every.id}`)).json.paused, true, 'the API shows it paused');
    // (a paused schedule's ticks go on being recorded, as skipped: the history grows while the page is read)
    await page.goto(`${URL_BASE}/ui/#/schedules/${every.id}`);
    await page.locator('#ticks tbody tr').first().waitFor();
    eq(await page.locator('#ticks tbody tr').count(), 20, 'the first page: 20 ticks');
    const page1 = await page.locator('#ticks tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.nominal));
    const cursor = Math.floor(Date.parse(page1[19]) / 1000);
    const older = (await api('GET', `/api/v1/schedules/${every.id}?limit=20&before=${cursor}`)).json.ticks;
    assert(older.length >= 1, 'the API has older ticks');
    await page.click('#older-ticks');
    await page.waitForFunction((n) => document.querySelectorAll('#ticks tbody tr').length === n, 20 + older.length);
    const shown = await page.locator('#ticks tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.nominal));
    eq(JSON.stringify(shown.slice(20)), JSON.stringify(older.map((t) => t.nominal_at)), 'the second page is the API\'s page before the cursor');
    // an every-second cron: consecutive seconds, newest first, none missing or twice across the two pages
    for (let i = 1; i < shown.length; i++) eq(Date.parse(shown[i - 1]) - Date.parse(shown[i]), 1000, `tick ${i} one second before tick ${i - 1}`);
    const first = (await api('GET', `/api/v1/schedules/${every.id}?limit=100`)).json.ticks.find((t) => t.nominal_at === shown[0]);
    const cells = await page.locator('#ticks tbody tr').first().locator('td').allInnerTexts();
    assert(cells[1].includes(first.outcome), `outcome ${first.outcome}: ${cells[1]}`);
    eq(cells[2], first.run ? `#${first.run}` : '—', 'the run it started');
    const fired = page.locator('#ticks tbody tr', { has: page.locator('a[href^="#/runs/"]') });
    assert(await fired.count() >= 1, 'some ticks fired runs, linked');
    await page.screenshot({ path: `${SHOTS}/schedule-ticks-1280.png`, fullPage: true });
    await narrow(page, `#/schedules/${dst.id}`, 'schedule', '#next');
  });

  await test('triggers: a workflow\'s data trigger listed, paused and resumed from the page', async () => {
    mkdirSync(`${HOME}/pages-incoming`, { recursive: true });
    await register(`name: pages-data
params:
  data_added: {default: "[]"}
  data_changed: {default: "[]"}
  data_fingerprint: {default: none}
triggers:
  - data: {path: pages-incoming, quiet: 1s}
steps:
  - {name: s, command: [sh, -c, "true"]}
`, 'pages-data.yaml', HOME);
    const t = (await api('GET', '/api/v1/triggers')).json.triggers.find((x) => x.workflow === 'pages-data');
    assert(t, 'the trigger exists');
    await page.goto(`${URL_BASE}/ui/#/schedules`);
    const row = page.locator(`#triggers tr[data-trigger="${t.id}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    eq(cells[1], 'data', 'kind');
    assert(/active/.test(cells[3]), `active: ${cells[3]}`);
    await page.click(`#pause-t${t.id}`);
    await page.locator('#action-result.ok', { hasText: 'Pause trigger pages-data/' }).waitFor();
    await row.locator('td.paused', { hasText: 'paused' }).waitFor();
    eq((await api('GET', '/api/v1/triggers')).json.triggers.find((x) => x.id === t.id).paused, true, 'the API shows paused');
    await page.click(`#pause-t${t.id}`);
    await row.locator('td.paused', { hasText: 'active' }).waitFor();
    eq((await api('GET', '/api/v1/triggers')).json.triggers.find((x) => x.id === t.id).paused, false, 'the API shows resumed');
    await page.screenshot({ path: `${SHOTS}/schedules-1280.png`, fullPage: true });
    await narrow(page, '#/schedules', 'schedules', '#schedules');
  });

  await test('no console errors (CSP violations included)', async () => {
    eq(consoleErrors.length, 0, `console errors: ${consoleErrors.join(' | ')}`);
  });
} finally {
  await browser.close();
}
done();
