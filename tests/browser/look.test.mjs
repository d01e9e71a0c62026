// The console's look, in real headless Chromium against the real ferryd that
// run.sh started: empty lists say what makes the first entry (the suite
// shares one daemon, so a list is checked empty only where it is empty, and
// the runs list always through a filter that matches nothing); a step named
// after its kind is labelled once in the DAG, another shows its kind as a
// smaller second line; the attempts table of a step with a long failure
// reason keeps its Log column inside the panel at 1280 and 375 px; dark mode
// follows the system (emulateMedia) and every text on the pages has a
// contrast of 4.5:1 or more against what is behind it, light and dark. No
// console error or CSP violation. Screenshots look-{light,dark}-{1280,375}.png.
import { writeFileSync } from 'node:fs';
import { URL_BASE, SHOTS, TOKEN, test, assert, eq, api, waitRun, launch, signedIn, consoleErrors, done } from './harness.mjs';

const HOME = process.env.FERRY_HOME;
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });

const SCRIPT = `${HOME}/look-train.py`;
writeFileSync(SCRIPT, `import json, os
with open(os.environ["FERRY_METRICS_FILE"], "a") as out:
    for i in range(20):
        out.write(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\\n")
`);
// a step named after its kind (train), one with a kind of its own (prep: run), one failing with a long reason
const WF = `name: look
steps:
  - name: prep
    command: [sh, -c, 'true']
  - name: train
    kind: train
    needs: [prep]
    command: [python3, ${SCRIPT}]
  - name: fails
    needs: [prep]
    command: [sh, -c, 'echo "the data set at /srv/data/a-rather-long-path/that-goes-on-and-on was not there: $(printf "%0200d" 0 | tr 0 y)"; exit 3']
`;

// Every visible text in the document whose contrast against what is behind it is under 4.5:1:
// its colour (blended by the opacity above it) against the first opaque background up the tree;
// an SVG text's fill against its node's shape. Disabled controls are left out (WCAG exempts them).
function lowContrast() {
  const parse = (c) => {
    let m = /^rgba?\(([\d.]+)[, ]+([\d.]+)[, ]+([\d.]+)(?:[,/ ]+([\d.]+))?\)$/.exec(c);
    if (m) return [+m[1] / 255, +m[2] / 255, +m[3] / 255, m[4] === undefined ? 1 : +m[4]];
    m = /^color\(srgb ([\d.e-]+) ([\d.e-]+) ([\d.e-]+)(?: \/ ([\d.]+))?\)$/.exec(c);
    if (m) return [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]];
    return null;
  };
  const lum = ([r, g, b]) => [r, g, b].map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4))
    .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const blend = (fg, bg, a) => fg.slice(0, 3).map((v, i) => v * a + bg[i] * (1 - a));
  const backdrop = (e) => {
    for (let n = e; n && n.nodeType === 1; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0.5) return c;
    }
    return parse(getComputedStyle(document.documentElement).backgroundColor) || [1, 1, 1, 1];
  };
  const opacity = (e) => { let o = 1; for (let n = e; n && n.nodeType === 1; n = n.parentElement) o *= +getComputedStyle(n).opacity; return o; };
  const bad = [];
  let checked = 0;
  for (const e of document.querySelectorAll('body *')) {
    if (!e.getClientRects().length || e.closest('.sr-only, [hidden], :disabled, option, script, title')) continue;
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const cs = getComputedStyle(e);
    if (cs.visibility === 'hidden') continue;
    let fg, bg;
    if (e instanceof SVGElement) {
      const shape = e.closest('g')?.querySelector('polygon, ellipse, path');
      fg = parse(cs.fill);
      bg = shape && parse(getComputedStyle(shape).fill);
      if (!bg || bg[3] < 0.5) bg = backdrop(e.closest('svg').parentElement);
    } else {
      fg = parse(cs.color);
      bg = backdrop(e);
    }
    if (!fg || !bg) { bad.push(`${e.tagName}: colour not read (${cs.color} / ${cs.fill})`); continue; }
    const r = ratio(blend(fg, bg, (fg[3] ?? 1) * opacity(e)), bg);
    checked++;
    if (r < 4.5) {
      const what = `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ''}${e.classList.length ? `.${[...e.classList].join('.')}` : ''}`;
      bad.push(`${what} "${e.textContent.trim().slice(0, 30)}" ${r.toFixed(2)}:1`);
    }
  }
  return { checked, bad };
}

async function contrastOk(page, where) {
  const { checked, bad } = await page.evaluate(lowContrast);
  assert(checked > 5, `${where}: texts checked (${checked})`);
  assert(!bad.length, `${where}: text under 4.5:1: ${bad.slice(0, 8).join('; ')}${bad.length > 8 ? ` (+${bad.length - 8})` : ''}`);
}

const colours = (page) => page.evaluate(() => {
  const cs = getComputedStyle(document.body);
  return { bg: cs.backgroundColor, fg: cs.color };
});

const page = await signedIn(ctx, TOKEN, 'look');
try {
  await test('empty lists say what makes the first one', async () => {
    await page.locator('#runs').waitFor();
    // the runs list through a filter that matches nothing: says so
    await page.goto(`${URL_BASE}/ui/#/runs?workflow=look-matches-nothing`);
    await page.locator('.paging .note', { hasText: 'No runs match these filters.' }).waitFor();
    const lists = [
      ['/api/v1/runs?limit=1', (j) => j.runs, '#/runs', '.paging .note', /ferry submit FILE\.yaml/],
      ['/api/v1/models', (j) => j.models, '#/models', '#models-empty', /kind: register/],
      ['/api/v1/deployments', (j) => j, '#/deployments', '#deployments-empty', /kind: deploy/],
      ['/api/v1/schedules', (j) => j.schedules, '#/schedules', '#schedules-empty', /ferry schedules create/],
      ['/api/v1/triggers', (j) => j.triggers, '#/schedules', '#triggers-empty', /triggers:/],
    ];
    let empty = 0;
    for (const [path, items, hash, sel, next] of lists) {
      const r = await api('GET', path);
      eq(r.status, 200, `GET ${path}`);
      if ((items(r.json) || []).length) continue; // another test file made one: nothing empty to see
      empty++;
      await page.goto(`${URL_BASE}/ui/${hash}`);
      const text = await page.locator(sel, { hasText: /No / }).innerText();
      assert(next.test(text), `${hash}: the empty state says what to do next: ${text}`);
    }
    console.log(`    # ${empty} of ${lists.length} lists were empty here and checked`);
  });

  let runId;
  await test('a step named after its kind is labelled once in the DAG; another shows its kind smaller', async () => {
    const sub = await api('POST', '/api/v1/runs', { yaml: WF, filename: 'look.yaml' });
    eq(sub.status, 201, `submit: ${sub.text}`);
    runId = sub.json.id;
    await waitRun(runId, 'failed', 30);
    await page.goto(`${URL_BASE}/ui/#/runs/${runId}`);
    await page.locator('#dag g[id="step-train"].state-succeeded').waitFor();
    const train = await page.locator('#dag g[id="step-train"] text').allTextContents();
    eq(JSON.stringify(train), '["train"]', 'the train step of kind train: its name once');
    const prep = await page.locator('#dag g[id="step-prep"] text').allTextContents();
    eq(JSON.stringify(prep), '["prep","run"]', 'prep of kind run: the name, then the kind');
    const sizes = await page.$$eval('#dag g[id="step-prep"] text', (ts) => ts.map((t) => parseFloat(getComputedStyle(t).fontSize)));
    assert(sizes[1] < sizes[0], `the kind is smaller than the name (${sizes})`);
  });

  // the Log cell's right edge inside the panel, and the table's box inside the panel
  async function attemptsFit(width, step) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(`${URL_BASE}/ui/#/runs/${runId}`);
    await page.click(`#steps tr[data-step="${step}"] button`);
    await page.locator('#detail-h', { hasText: step }).waitFor();
    await page.locator('#attempts td.reason', { hasText: step === 'fails' ? 'yyyyyyyy' : '' }).waitFor();
    const m = await page.evaluate(() => {
      const panel = document.querySelector('#attempts').closest('.detail').getBoundingClientRect();
      const wrap = document.querySelector('#attempts').closest('.table-wrap');
      const log = document.querySelector('#attempts td.log-cell').getBoundingClientRect();
      return { panelRight: panel.right, wrapRight: wrap.getBoundingClientRect().right, logRight: log.right,
        scroll: wrap.scrollWidth, client: wrap.clientWidth, page: document.documentElement.scrollWidth };
    });
    assert(m.page <= width, `${width} px: no page-wide horizontal scroll (${JSON.stringify(m)})`);
    assert(m.wrapRight <= m.panelRight + 0.5, `${width} px: the table's box inside the panel (${JSON.stringify(m)})`);
    assert(m.logRight <= m.wrapRight + 0.5 || m.scroll > m.client,
      `${width} px: the Log column in view, or the table scrolls in its box (${JSON.stringify(m)})`);
    assert(m.logRight <= m.wrapRight + 0.5 && m.scroll <= m.client + 1,
      `${width} px, ${step}: the table fits its box, Log column included, no scroll (${JSON.stringify(m)})`);
  }
  await test('the attempts table keeps its Log column in the panel at 1280 and 375 px, a long reason wrapped', async () => {
    for (const step of ['fails', 'train']) {
      await attemptsFit(1280, step);
      await attemptsFit(375, step);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  await test('light: the run page with its DAG, step panel and curves has every text at 4.5:1 or more', async () => {
    await page.goto(`${URL_BASE}/ui/#/runs/${runId}`);
    await page.click('#steps tr[data-step="train"] button');
    await page.locator('#curves figure[data-metric="loss"] canvas').waitFor();
    await contrastOk(page, 'run page, light');
    await page.screenshot({ path: `${SHOTS}/look-light-1280.png`, fullPage: true });
  });

  await test('dark mode follows the system: other colours, and every text at 4.5:1 or more on every page', async () => {
    await page.emulateMedia({ colorScheme: 'light' });
    const light = await colours(page);
    await page.emulateMedia({ colorScheme: 'dark' });
    const dark = await colours(page);
    assert(light.bg !== dark.bg && light.fg !== dark.fg, `the background and text change: ${JSON.stringify({ light, dark })}`);
    const lum = (c) => c.match(/[\d.]+/g).slice(0, 3).reduce((s, v) => s + +v, 0);
    assert(lum(dark.bg) < lum(dark.fg), `dark: light text on a dark background (${JSON.stringify(dark)})`);
    // the chart colours charts.js reads follow too
    const chart = await page.evaluate(() => getComputedStyle(document.documentElement).getPropertyValue('--chart-axis').trim());
    assert(chart && chart !== '#57606a', `--chart-axis has a dark value (${chart})`);
    await page.locator('#curves figure[data-metric="loss"] canvas').waitFor();
    await contrastOk(page, 'run page, dark');
    await page.screenshot({ path: `${SHOTS}/look-dark-1280.png`, fullPage: true });
    await page.setViewportSize({ width: 375, height: 800 });
    await page.goto(`${URL_BASE}/ui/#/runs/${runId}`);
    await page.click('#steps tr[data-step="fails"] button');
    await page.locator('#attempts td.reason').waitFor();
    await contrastOk(page, 'run page, dark, 375 px');
    await page.screenshot({ path: `${SHOTS}/look-dark-375.png`, fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
    for (const [hash, ready] of [['#/runs', '.paging .note:not(:empty)'], ['#/submit', '#view h1'], ['#/models', '#models, #models-empty'],
      ['#/deployments', '#deployments, #deployments-empty'], ['#/schedules', '#triggers, #triggers-empty']]) {
      await page.goto(`${URL_BASE}/ui/${hash}`);
      await page.locator(ready).first().waitFor();
      await page.waitForTimeout(300);
      await contrastOk(page, `${hash}, dark`);
    }
    // one of each where the suite has one: a model, a deployment, a schedule
    for (const [path, pick, hash] of [['/api/v1/models', (j) => j.models?.[0]?.name, (x) => `#/models/${encodeURIComponent(x)}`],
      ['/api/v1/deployments', (j) => j?.[0]?.id, (x) => `#/deployments/${x}`],
      ['/api/v1/schedules', (j) => j.schedules?.[0]?.id, (x) => `#/schedules/${x}`]]) {
      const x = pick((await api('GET', path)).json);
      if (x === undefined || x === null) continue;
      await page.goto(`${URL_BASE}/ui/${hash(x)}`);
      await page.locator('#view h1').first().waitFor();
      await page.waitForTimeout(500);
      await contrastOk(page, `${hash(x)}, dark`);
    }
    await page.emulateMedia({ colorScheme: 'light' });
  });

  await test('no console errors or CSP violations', async () => {
    eq(consoleErrors.length, 0, `console errors: ${consoleErrors.join(' | ')}`);
  });
} finally {
  await browser.close();
}
done();
