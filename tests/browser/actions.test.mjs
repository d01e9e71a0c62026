// Acting from the console and reading logs at scale, in real headless
// Chromium against the real ferryd that run.sh started:
//   - workflows/digits.yaml submitted from the form (params from its
//     declarations), every step on the run page, the label step continued
//     from the page with a JSON payload, states changing live to succeeded
//     (through train — a sweep over C and gamma —, the gate, register and
//     deploy with real HAProxy and model servers), train's leaderboard,
//     its best item's log and metrics, the actor in the events;
//   - stop and retry from the page; a viewer token sees and cannot act;
//   - logs: a 200 MB log opens at its tail and pages back,
//     live follow, carriage-return collapse, search, Ferry's lines, download.
// Screenshots go to $FERRY_SHOTS.
import { readFileSync, mkdtempSync, statSync, chmodSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  URL_BASE, SHOTS, ROOT, test, assert, eq, api, waitRun, waitStep, namedToken, launch, signedIn, consoleErrors, done,
} from './harness.mjs';

const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
const scratch = mkdtempSync(join(tmpdir(), 'ferry-browser-'));
chmodSync(scratch, 0o1777); // jobs run as ferry-job and leave their markers here
let op, viewer, page, digitsRun, stopRun;

try {
  await test('digits.yaml from the submit form: label continued from the page, live to succeeded, train log and metrics', async () => {
    op = await namedToken('browser-op', 'operator');
    viewer = await namedToken('browser-viewer', 'viewer');
    // digits deploys: a deploy step needs the run's submitter to be an admin when it acts
    const adm = await namedToken('browser-admin', 'admin');
    // the console is under test, not latency: the deploy's load-test p99 bound relaxed as the suite's other
    // runs of the example do (on a slow day it failed at 16 clients and the run never reached the page's end)
    const yaml = readFileSync(`${ROOT}/workflows/digits.yaml`, 'utf8').replace('p99_ms: "< 500"', 'p99_ms: "< 10000"');
    assert(yaml.includes('p99_ms: "< 10000"'), 'the example\'s load-test bound was found');
    const reg = await api('POST', '/api/v1/workflows', { yaml, filename: 'digits.yaml', workdir: `${ROOT}/workflows` });
    eq(reg.status, 201, `register digits: ${reg.text}`);
    page = await signedIn(ctx, adm, 'admin', '#/submit?workflow=digits');
    await page.locator('#who', { hasText: 'browser-admin (admin)' }).waitFor();
    // the form is built from the declared params, at their defaults
    eq(await page.locator('#param-C').inputValue(), '[1, 10]', 'C from its default (the list the sweep searches)');
    eq(await page.locator('#param-gamma').inputValue(), '[0.01, 0.05]', 'gamma from its default');
    await page.fill('#param-C', '8'); // one value: the sweep trains C=8 with each gamma
    await page.click('#submit-go');
    await page.waitForURL(/#\/runs\/\d+$/);
    digitsRun = Number(page.url().match(/#\/runs\/(\d+)$/)[1]);
    const run = (await api('GET', `/api/v1/runs/${digitsRun}`)).json;
    eq(run.params.C, '8', 'the run has the param from the form');
    eq(run.actor, 'browser-admin', 'the run was started by the named token');
    // every step, the ones not started too, in the table and the DAG
    await page.locator('#steps tbody tr').first().waitFor();
    const names = await page.locator('#steps tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.step));
    eq(JSON.stringify(names), JSON.stringify(run.steps.map((s) => s.name)), 'every step in the table');
    assert(names.length >= 5 && names.includes('train') && names.includes('deploy'), `digits' steps: ${names}`);
    for (const s of names) await page.locator(`#dag g[id="step-${s}"]`).waitFor();
    eq(await page.locator('#dag g[id="step-train"]').getAttribute('class'), 'node step state-blocked', 'train not started: blocked');
    // the label step waits for a person: the page shows the task and continues it with a payload
    await page.locator('#dag g[id="step-label"].state-waiting').waitFor({ timeout: 20000 });
    await page.click('#dag g[id="step-label"]');
    await page.locator('#label-task').waitFor();
    const task = await page.locator('#label-task').innerText();
    assert(/items in .*digits\/data have no label/.test(task), `the labelling task's details: ${task}`);
    await page.fill('#continue-data', '{"reviewed_by": not json}');
    await page.click('#continue');
    await page.locator('#action-result.error', { hasText: 'not JSON' }).waitFor();
    eq((await api('GET', `/api/v1/runs/${digitsRun}`)).json.steps.find((s) => s.name === 'label').state, 'waiting',
      'a payload that is not JSON is not sent');
    await page.fill('#continue-data', '{"reviewed_by": "browser"}');
    await page.screenshot({ path: `${SHOTS}/continue-1280.png`, fullPage: true });
    await page.click('#continue');
    await page.locator('#action-result.ok', { hasText: 'as browser-admin' }).waitFor();
    // live, without a reload: train runs, then everything succeeds (the deploy's load test included)
    await page.locator('#dag g[id="step-train"].state-running, #dag g[id="step-train"].state-succeeded').first().waitFor({ timeout: 20000 });
    await page.locator('#steps tr[data-step="deploy"] .state-succeeded').waitFor({ timeout: 150000 });
    await page.locator('#live', { hasText: 'over' }).waitFor({ timeout: 20000 });
    await page.locator('h1 .state-succeeded').waitFor();
    const after = (await api('GET', `/api/v1/runs/${digitsRun}`)).json;
    eq(after.state, 'succeeded', 'the run succeeded');
    eq(after.steps.find((s) => s.name === 'label').outputs.reviewed_by, 'browser', 'the payload became the output');
    // train, a sweep: its two candidates (C=8 from the form, each gamma), the best and the leaderboard,
    // its metrics (the best's), the best item's log with the param rendered
    await page.click('#dag g[id="step-train"]');
    await page.locator('#detail-h', { hasText: 'train' }).waitFor();
    await page.locator('#command', { hasText: '{{item.C}}' }).waitFor();
    const tr = after.steps.find((s) => s.name === 'train');
    eq(tr.outputs.leaderboard.length, 2, 'two candidates ranked');
    await page.locator('#leaderboard-table tbody tr').first().waitFor();
    eq(await page.locator('#leaderboard-table tbody tr').count(), 2, 'the leaderboard on the page');
    await page.locator('#best', { hasText: `${tr.outputs.best.name} C=8, gamma=${tr.outputs.best.item.gamma}` }).waitFor();
    await page.locator('#metrics tr').first().waitFor();
    const metrics = await page.locator('#metrics').innerText();
    assert(/cv_accuracy/.test(metrics), `train's metrics (the best's): ${metrics}`);
    await page.click('#items-show');
    await page.locator('#items-table tbody tr').nth(1).waitFor();
    const items = await page.locator('#items-table tbody').innerText();
    assert(/"C":8/.test(items) && /"gamma":0.01/.test(items) && /"gamma":0.05/.test(items), `train's items: ${items}`);
    await page.click('#best button.item-log');
    await page.locator('#log-h', { hasText: `Log of ${tr.outputs.best.name}` }).waitFor();
    await page.locator('#log .ln', { hasText: 'trained SVC(C=8.0' }).first().waitFor();
    const log = await page.locator('#log').innerText();
    const real = await api('GET', `/api/v1/runs/${digitsRun}/steps/${encodeURIComponent(tr.outputs.best.name)}/logs`);
    const lastLine = real.text.trimEnd().split('\n').pop();
    assert(log.includes(lastLine), `the page shows the best item's log (its last line ${JSON.stringify(lastLine)})`);
    await page.screenshot({ path: `${SHOTS}/digits-train-1280.png`, fullPage: true });
    const stray = (await page.locator('#view').innerText()).split('\n').filter((l) => /^(null|undefined|\[object Object\])$/.test(l.trim()));
    eq(stray.length, 0, 'no stray null/undefined text on the run page');
    // its deployment: the load test the deploy step ran (digits.yaml: 5 levels, p99 and error-rate checks)
    const dep = ((await api('GET', '/api/v1/deployments')).json || [])[0];
    assert(dep && dep.model === 'digits', `the digits deployment: ${JSON.stringify(dep).slice(0, 200)}`);
    await page.goto(`${URL_BASE}/ui/#/deployments/${dep.id}`);
    await page.locator('#load-tests .load-levels tbody tr').first().waitFor();
    eq(await page.locator('#load-tests .load-levels tbody tr').count(), 5, 'five load-test levels (1…16 clients)');
    const checks = await page.locator('#load-tests li').allInnerTexts();
    assert(checks.length === 2 && checks.every((c) => c.includes('succeeded')) && checks.some((c) => c.includes('p99_ms')),
      `the load test's checks: ${checks}`);
    await page.screenshot({ path: `${SHOTS}/digits-deployment-1280.png`, fullPage: true });
    await page.goto(`${URL_BASE}/ui/#/runs/${digitsRun}`);
    await page.locator('#steps tbody tr').first().waitFor();
    // the continue is in the audit trail with the token's name
    await page.click('#events summary');
    await page.locator('#events tr[data-kind="step.continued"]').waitFor();
    const row = await page.locator('#events tr[data-kind="step.continued"]').innerText();
    assert(row.includes('browser-admin') && row.includes('label'), `the event names the token: ${row}`);
  });

  await test('stop and retry from the page, each in the events with the token name', async () => {
    const marker = join(scratch, 'second-time');
    const yaml = `name: console-stop
steps:
  - name: slow
    command: [sh, -c, 'if [ -f "${marker}" ]; then echo second attempt; exit 0; fi; touch "${marker}"; echo first attempt; sleep 60']
  - {name: after, needs: [slow], command: [sh, -c, 'echo after']}
`;
    const sub = await api('POST', '/api/v1/runs', { yaml, filename: 'console-stop.yaml' }, op);
    eq(sub.status, 201, sub.text);
    stopRun = sub.json.id;
    await waitStep(stopRun, 'slow', 'running', 20);
    page = await signedIn(ctx, op, 'operator', '#/runs'); // an operator stops and retries
    await page.goto(`${URL_BASE}/ui/#/runs/${stopRun}`);
    await page.locator('#stop').waitFor();
    eq(await page.locator('#retry').isVisible(), false, 'no retry while the run goes');
    await page.click('#stop');
    await page.locator('#action-result.ok', { hasText: `Stop run #${stopRun}` }).waitFor();
    await page.locator('h1 .state-stopped').waitFor({ timeout: 20000 });
    await page.locator('#retry').waitFor();
    eq(await page.locator('#stop').isVisible(), false, 'no stop once stopped');
    await page.click('#retry');
    await page.locator('#action-result.ok', { hasText: `Retry run #${stopRun}` }).waitFor();
    // the stream is followed again: the retried run goes on to succeed on the page
    await page.locator('h1 .state-succeeded').waitFor({ timeout: 30000 });
    await page.locator('#steps tr[data-step="after"] .state-succeeded').waitFor();
    // retry from a step of the finished run
    await page.click('#steps tr[data-step="after"] button');
    await page.click('#retry-from');
    await page.locator('#action-result.ok', { hasText: 'Retry from after' }).waitFor();
    await waitRun(stopRun, 'succeeded', 30);
    const ev = (await api('GET', `/api/v1/runs/${stopRun}/events`)).json.events;
    const by = (kind) => ev.filter((e) => e.kind === kind).map((e) => e.actor);
    eq(JSON.stringify(by('run.stop')), '["browser-op"]', 'the stop is the token\'s');
    eq(JSON.stringify(by('run.retry')), '["browser-op","browser-op"]', 'both retries are the token\'s');
    const froms = ev.filter((e) => e.kind === 'run.retry').map((e) => (e.detail || {}).from || null);
    eq(JSON.stringify(froms), '[null,"after"]', 'the second retry was from "after"');
    await page.screenshot({ path: `${SHOTS}/run-actions-1280.png`, fullPage: true });
  });

  await test('a viewer token sees everything and cannot act', async () => {
    const yaml = `name: console-viewer
steps:
  - {name: approve, kind: gate}
  - {name: ship, needs: [approve], command: [sh, -c, 'echo shipped']}
`;
    const sub = await api('POST', '/api/v1/runs', { yaml, filename: 'console-viewer.yaml' }, op);
    eq(sub.status, 201, sub.text);
    const id = sub.json.id;
    await waitStep(id, 'approve', 'waiting', 20);
    const c2 = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const p = await signedIn(c2, viewer, 'viewer', `#/runs/${id}`);
      await p.locator('#who', { hasText: 'browser-viewer (viewer)' }).waitFor();
      await p.locator('#role-note', { hasText: 'browser-viewer (viewer): you can look at everything here, not act' }).waitFor();
      assert(await p.locator('#stop').isDisabled(), 'stop is disabled for a viewer');
      await p.click('#dag g[id="step-approve"]');
      await p.locator('#continue').waitFor();
      assert(await p.locator('#continue').isDisabled(), 'continue is disabled for a viewer');
      // forced (the button enabled by hand): the API refuses, and the page says so
      await p.evaluate(() => { document.querySelector('#continue').disabled = false; });
      await p.click('#continue');
      await p.locator('#action-result.error', { hasText: 'refused' }).waitFor();
      const msg = await p.locator('#action-result').innerText();
      assert(msg.includes('browser-viewer') && msg.includes('viewer'), `the API's reason: ${msg}`);
      eq((await api('GET', `/api/v1/runs/${id}`)).json.steps[0].state, 'waiting', 'still waiting: nothing was changed');
      // and reads all: the run list, a step's panel, the submit form (its button disabled)
      await p.goto(`${URL_BASE}/ui/#/submit`);
      await p.locator('#submit-go').waitFor();
      assert(await p.locator('#submit-go').isDisabled(), 'submit is disabled for a viewer');
      await p.screenshot({ path: `${SHOTS}/viewer-1280.png`, fullPage: true });
    } finally {
      await c2.close();
    }
    consoleErrors.splice(0, consoleErrors.length, ...consoleErrors.filter((e) => !(e.startsWith('viewer:') && e.includes('403'))));
    await api('POST', `/api/v1/runs/${id}/stop`);
  });

  await test('logs: a 200 MB log opens at its tail, pages back, and downloads whole', async () => {
    const yaml = `name: console-biglog
steps:
  - name: big
    command: [sh, -c, 'yes "the quick brown fox jumps over the lazy dog 0123456789" | head -c 209715200; echo; echo "the-very-last-line"']
`;
    const sub = await api('POST', '/api/v1/runs', { yaml, filename: 'console-biglog.yaml' }, op);
    eq(sub.status, 201, sub.text);
    const id = sub.json.id;
    await waitRun(id, 'succeeded', 90);
    await page.goto(`${URL_BASE}/ui/#/runs/${id}`);
    await page.locator('#steps tr[data-step="big"]').waitFor();
    const t0 = Date.now();
    await page.click('#steps tr[data-step="big"] button');
    await page.locator('#log', { hasText: 'the-very-last-line' }).waitFor({ timeout: 10000 });
    const ms = Date.now() - t0;
    console.log(`# 200 MB log: step click to its tail on screen in ${ms} ms`);
    // how fast is make bench's (ui: big_log_tail_ms); here, that only the
    // tail was fetched: the whole file would not come within the wait
    const note = await page.locator('#log-note').innerText();
    assert(/200\.\d MiB/.test(note), `the note gives the whole size: ${note}`);
    const lines1 = await page.locator('#log .ln').count();
    assert(lines1 > 100 && lines1 < 2000, `only the tail is loaded (${lines1} lines)`);
    await page.click('#log-older');
    await page.waitForFunction((n) => document.querySelectorAll('#log .ln').length > n, lines1);
    const lines2 = await page.locator('#log .ln').count();
    assert(lines2 > lines1 * 3, `older lines in front (${lines1} → ${lines2})`);
    const first = await page.locator('#log .ln').first().innerText();
    eq(first.trim(), 'the quick brown fox jumps over the lazy dog 0123456789', 'paging back lands on whole lines');
    const heap = await page.evaluate(() => (performance.memory ? performance.memory.usedJSHeapSize : 0));
    console.log(`# after paging back once: ${lines2} lines in the page, JS heap ${(heap / 1048576).toFixed(1)} MiB`);
    assert(heap === 0 || heap < 200 * 1048576, `bounded memory (heap ${heap})`);
    // download: the whole file, byte for byte the size on disk
    const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), page.click('#log-download')]);
    eq(dl.suggestedFilename(), `run-${id}-big-attempt-1.log`, 'the download is named after the run, step and attempt');
    const path = join(scratch, 'big.log');
    await dl.saveAs(path);
    eq(statSync(path).size, 209715200 + 1 + 'the-very-last-line\n'.length, 'the whole log downloaded');
    await page.screenshot({ path: `${SHOTS}/biglog-1280.png` });
  });

  await test('logs: live follow within a second, carriage returns collapsed, search jumps, Ferry\'s lines filtered', async () => {
    const yaml = `name: console-logs
steps:
  - name: bar
    command: [sh, -c, 'printf "download 10%%\\rdownload 50%%\\rdownload 100%%\\n"; for i in 1 2 3 4 5 6 7 8 9 10; do echo "epoch $i loss 0.$i"; sleep 0.4; done; echo "epoch done"']
  - {name: broken, command: [/nonexistent/trainer, --fast]}
`;
    const sub = await api('POST', '/api/v1/runs', { yaml, filename: 'console-logs.yaml' }, op);
    eq(sub.status, 201, sub.text);
    const id = sub.json.id;
    await waitStep(id, 'bar', 'running', 20);
    await page.goto(`${URL_BASE}/ui/#/runs/${id}`);
    await page.click('#steps tr[data-step="bar"] button');
    await page.locator('#log-live', { hasText: 'following' }).waitFor();
    // lines arrive while the step runs: each seen within a second of being written
    const seen = await page.evaluate(() => new Promise((resolve) => {
      const pre = document.querySelector('#log');
      const got = [];
      const obs = new MutationObserver(() => {
        const m = pre.textContent.match(/epoch (\d+) loss/g) || [];
        if (m.length > got.length) got.push({ n: m.length, at: Date.now() });
        if (/epoch done/.test(pre.textContent)) { obs.disconnect(); resolve(got); }
      });
      obs.observe(pre, { childList: true, subtree: true, characterData: true });
      setTimeout(() => { obs.disconnect(); resolve(got); }, 15000);
    }));
    assert(seen.length >= 4, `lines appeared one after another while the step ran (${JSON.stringify(seen)})`);
    const gaps = seen.slice(1).map((s, i) => s.at - seen[i].at);
    // written every 0.4 s: the lines come at that pace (the median gap), and a stall of the
    // browser's or the daemon's on a loaded machine (make test runs this beside the integration
    // lanes: one gap of 1,552 ms among 400s in a clean clone's run) is still under 2.5 s; a
    // follow that looked at its file only every second or more would fail the median
    const med = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)];
    assert(med < 700 && Math.max(...gaps) < 2500, `each new line within ~a second of the one before (gaps ${gaps})`);
    await waitRun(id, 'failed', 30);
    // the progress bar: what a terminal shows (its last state), once
    const log = await page.locator('#log').innerText();
    assert(log.includes('download 100%') && !log.includes('download 50%'), `carriage returns collapsed: ${log.slice(0, 200)}`);
    // the run changing while one types: the panel is drawn again and the search box keeps the focus
    // and what was typed (it lost both, and a fill here was lost in two clean-clone runs)
    await page.focus('#log-search');
    await page.keyboard.type('LOSS');
    await page.evaluate(() => document.querySelector('#detail').dispatchEvent(new Event('rerender')));
    eq(await page.evaluate(() => document.activeElement && document.activeElement.id), 'log-search',
      'the search box keeps the focus when the panel is drawn again');
    await page.keyboard.type(' 0.');
    eq(await page.inputValue('#log-search'), 'LOSS 0.', 'what was typed before and after the redraw');
    // search: every match marked, Enter moves to the next
    await page.fill('#log-search', 'LOSS 0.');
    // (this wait timed out in clean-clone runs: a redraw of the panel took the fill's focus, kept since;
    // should it time out again, say what the page showed)
    await page.locator('#log-count', { hasText: 'of 10' }).waitFor().catch(async (e) => {
      const count = await page.locator('#log-count').innerText().catch(() => '?');
      const shown = await page.locator('#log').innerText().catch(() => '?');
      // which search box, what it holds, what is marked: the next failure says more than "cause unknown"
      const box = await page.evaluate(() => ({ boxes: document.querySelectorAll('#log-search').length,
        value: document.querySelector('#log-search')?.value, focused: document.activeElement?.id,
        marks: document.querySelectorAll('#log mark').length, logs: document.querySelectorAll('pre#log').length,
        live: document.querySelector('#log-live')?.textContent })).catch(() => '?');
      throw new Error(`search count "${count}" instead of "… of 10" (${JSON.stringify(box)}); the log shown: ${JSON.stringify(shown.slice(-700))}; ${e.message.split('\n')[0]}`);
    });
    eq(await page.locator('#log mark').count(), 10, 'ten matches marked, case-insensitively');
    eq(await page.locator('#log-count').innerText(), '1 of 10', 'the first match is current');
    await page.press('#log-search', 'Enter');
    eq(await page.locator('#log-count').innerText(), '2 of 10', 'Enter: the next match');
    eq(await page.locator('#log mark.current').innerText(), 'loss 0.', 'the current match is marked');
    await page.press('#log-search', 'Shift+Enter');
    await page.press('#log-search', 'Shift+Enter');
    eq(await page.locator('#log-count').innerText(), '10 of 10', 'Shift+Enter wraps back to the last');
    // Ferry's own lines (a command that cannot be run) shown alone or hidden
    await page.click('#steps tr[data-step="broken"] button');
    await page.locator('#log .ln.ferry').first().waitFor();
    const ferryLine = await page.locator('#log .ln.ferry').first().innerText();
    assert(/^ferry: cannot execute/.test(ferryLine), `Ferry's line: ${ferryLine}`);
    await page.selectOption('#log-filter', 'job');
    eq(await page.locator('#log .ln.ferry').first().isVisible(), false, "the job's lines only: Ferry's hidden");
    await page.selectOption('#log-filter', 'ferry');
    eq(await page.locator('#log .ln.ferry').first().isVisible(), true, "Ferry's lines only: shown");
    await page.screenshot({ path: `${SHOTS}/logs-1280.png`, fullPage: true });
  });

  await test('no CSP violation or script error on any page', async () => {
    eq(consoleErrors.length, 0, `console errors: ${consoleErrors.join(' | ')}`);
  });
} finally {
  // the digits deployment: stopped through the API (run.sh kills what is left all the same)
  const deps = await api('GET', '/api/v1/deployments').catch(() => null);
  for (const d of (deps && deps.json && deps.json.deployments) || []) await api('DELETE', `/api/v1/deployments/${d.id}`).catch(() => {});
  await browser.close();
  // the scratch directory holds the 200 MB log: each run of the suite left one in /tmp
  try { rmSync(scratch, { recursive: true, force: true }); } catch (e) { console.log(`# ${scratch} left: ${e.message}`); }
}
done();
