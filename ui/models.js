// Ferry console: the model registry. #/models lists the models (latest
// version, aliases, created); #/models/NAME shows its versions, newest
// first, each with its metrics, lineage (the run that made it, the
// workflow's hash, the data fingerprint) and aliases, and compares two
// versions chosen with two selects: the union of their metric names, side
// by side, with the difference and whether it is better or worse said in
// words and a symbol (never colour alone). A version's run (its lineage)
// links to the run and, beside it, to #/compare with production's run.
// Read-only: aliases are moved with `ferry models alias` (an admin's act).

import { el, timeCell, callJSON, setView, viewSignal, emptyState } from './lib.js';

// Metric names where lower is better (loss, error, latency…): matched on the name, as a person would read it.
const LOWER_BETTER = /(loss|err|mse|mae|rmse|latency|p\d\d|_ms$|time|perplexity|wer|cer)/i;

export function lowerIsBetter(name) { return LOWER_BETTER.test(name); }

// A metric value as written: numbers keep up to 6 significant digits.
function fmt(v) {
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6)));
  if (v === undefined || v === null) return '—';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function shortHash(h) { return h ? String(h).replace(/^sha256:/, '').slice(0, 12) : '—'; }

// ---- the list ----

export async function modelsPage() {
  const signal = viewSignal();
  const page = await callJSON('/models', { signal });
  const models = page.models || [];
  const tbody = el('tbody', {}, models.map((m) => el('tr', { 'data-model': m.name },
    el('td', {}, el('a', { href: `#/models/${encodeURIComponent(m.name)}` }, m.name)),
    el('td', { class: 'num' }, m.latest || '—'),
    el('td', { class: 'num opt' }, m.versions ?? 0),
    el('td', {}, aliasList(m.aliases)),
    el('td', {}, timeCell(m.created_at)))));
  setView(el('h1', {}, 'Models'),
    models.length ? el('div', { class: 'table-wrap' }, el('table', { id: 'models' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Model'), el('th', { scope: 'col' }, 'Latest'),
        el('th', { scope: 'col', class: 'opt' }, 'Versions'), el('th', { scope: 'col' }, 'Aliases'),
        el('th', { scope: 'col' }, 'Created'))), tbody))
      : emptyState('No models yet. A workflow step of kind register makes the first version: `kind: register` with `model: NAME`, after the step that writes the model; outside a pipeline, `ferry models register NAME FILE`.', 'models-empty'));
}

// {alias: version} → "production → 0.0.3, latest → 0.0.3"
function aliasList(aliases) {
  const e = Object.entries(aliases || {});
  if (!e.length) return '—';
  return e.map(([a, v]) => `${a} → ${v}`).join(', ');
}

// ---- one model ----

export async function modelPage(name) {
  const signal = viewSignal();
  const [model, vs] = await Promise.all([
    callJSON(`/models/${encodeURIComponent(name)}`, { signal }),
    callJSON(`/models/${encodeURIComponent(name)}/versions`, { signal }),
  ]);
  const versions = vs.versions || [];
  const compare = el('section', { id: 'compare', 'aria-labelledby': 'compare-h' });
  setView(el('p', {}, el('a', { href: '#/models' }, '← Models')),
    el('h1', {}, `Model ${model.name}`),
    el('dl', { class: 'facts' },
      el('dt', {}, 'Versions'), el('dd', {}, String(model.versions ?? versions.length)),
      el('dt', {}, 'Latest'), el('dd', {}, model.latest || '—'),
      el('dt', {}, 'Aliases'), el('dd', {}, aliasList(model.aliases)),
      el('dt', {}, 'Created'), el('dd', {}, timeCell(model.created_at))),
    el('h2', {}, 'Versions'), versionsTable(versions), compare, eventsList(model.events || []));
  compareForm(compare, versions);
}

function versionsTable(versions) {
  if (!versions.length) return el('p', { class: 'note' }, 'No versions.');
  // the run that made the version the production alias names: each other version's run is compared with it
  const prod = versions.find((v) => (v.aliases || []).includes('production'));
  const prodRun = prod && prod.lineage ? prod.lineage.run : null;
  return el('div', { class: 'table-wrap' }, el('table', { id: 'versions' },
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Version'), el('th', { scope: 'col' }, 'Aliases'),
      el('th', { scope: 'col' }, 'Metrics'), el('th', { scope: 'col' }, 'Lineage'),
      el('th', { scope: 'col', class: 'opt' }, 'Artifact'), el('th', { scope: 'col' }, 'Registered'))),
    el('tbody', {}, versions.map((v) => el('tr', { 'data-version': v.version },
      el('th', { scope: 'row', class: 'num' }, v.version),
      el('td', {}, (v.aliases || []).length ? v.aliases.join(', ') : '—'),
      el('td', { class: 'metrics' }, metricsList(v.metrics)),
      el('td', {}, lineage(v.lineage || {}), compareProd(prodRun, v.lineage || {})),
      el('td', { class: 'opt' }, artifact(v.artifact)),
      el('td', {}, timeCell(v.created_at), v.actor ? el('span', { class: 'note' }, ` by ${v.actor}`) : null))))));
}

function metricsList(m) {
  const e = Object.entries(m || {});
  if (!e.length) return '—';
  return el('dl', { class: 'kv' }, e.flatMap(([k, v]) => [el('dt', {}, k), el('dd', { class: 'num' }, fmt(v))]));
}

function lineage(l) {
  return el('dl', { class: 'kv lineage' },
    el('dt', {}, 'run'), el('dd', {}, l.run ? el('a', { href: `#/runs/${l.run}` }, `#${l.run}`) : '—',
      l.step ? ` (${l.step})` : ''),
    el('dt', {}, 'workflow'), el('dd', { title: l.workflow_hash || '' }, l.workflow ? `${l.workflow} ` : '',
      el('code', { class: 'hash' }, shortHash(l.workflow_hash))),
    el('dt', {}, 'data'), el('dd', { title: l.data_fingerprint || '' },
      l.data_fingerprint ? el('code', { class: 'hash' }, shortHash(l.data_fingerprint)) : '—'));
}

// "Compare with production's run": the production version's run and this version's, on #/compare.
function compareProd(prodRun, l) {
  if (!prodRun || !l.run || l.run === prodRun) return null;
  return el('a', { class: 'compare-prod', href: `#/compare?runs=${prodRun},${l.run}` }, "Compare with production's run");
}

function artifact(a) {
  if (!a) return '—';
  return el('span', { title: a.sha256 ? `sha256 ${a.sha256}` : '' }, a.name || a.kind || '',
    a.bytes !== undefined && a.bytes !== null ? el('span', { class: 'note' }, ` ${a.bytes} B`) : null);
}

function eventsList(events) {
  if (!events.length) return null;
  return el('details', { id: 'model-events' }, el('summary', {}, `Alias history (${events.length})`),
    el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'At'), el('th', {}, 'Actor'), el('th', {}, 'Event'),
        el('th', {}, 'Alias'), el('th', {}, 'Version'))),
      el('tbody', {}, events.slice().reverse().map((e) => el('tr', {}, el('td', {}, timeCell(e.at)),
        el('td', {}, e.actor || ''), el('td', {}, e.kind), el('td', {}, e.alias || ''),
        el('td', {}, e.version || '')))))));
}

// ---- comparing two versions ----

function compareForm(box, versions) {
  if (versions.length < 2) { box.replaceChildren(); return; }
  const pick = (id, label, i) => {
    const s = el('select', { id, name: id }, versions.map((v, j) => el('option', { value: v.version, selected: j === i }, v.version)));
    return [s, el('div', {}, el('label', { for: id }, label), s)];
  };
  // the newest against the one before it, by default
  const [a, aBox] = pick('cmp-a', 'Version A', 1);
  const [b, bBox] = pick('cmp-b', 'Version B', 0);
  const table = el('div', { class: 'table-wrap' });
  const show = () => {
    const va = versions.find((v) => v.version === a.value), vb = versions.find((v) => v.version === b.value);
    table.replaceChildren(compareTable(va, vb));
  };
  a.addEventListener('change', show);
  b.addEventListener('change', show);
  box.replaceChildren(el('h2', { id: 'compare-h' }, 'Compare two versions'),
    el('div', { class: 'filters' }, aBox, bBox),
    el('p', { class: 'note' }, 'The difference is B − A. Lower is taken as better for names with loss, error, latency or time in them, higher for the rest.'),
    table);
  show();
}

function compareTable(va, vb) {
  const ma = va.metrics || {}, mb = vb.metrics || {};
  const names = [...new Set([...Object.keys(ma), ...Object.keys(mb)])].sort();
  if (!names.length) return el('p', { class: 'note' }, 'Neither version has metrics.');
  return el('table', { id: 'compare-table' },
    el('caption', { class: 'note' }, `${va.version} (A) against ${vb.version} (B)`),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Metric'), el('th', { scope: 'col' }, `A ${va.version}`),
      el('th', { scope: 'col' }, `B ${vb.version}`), el('th', { scope: 'col' }, 'B − A'))),
    el('tbody', {}, names.map((n) => {
      const x = ma[n], y = mb[n];
      return el('tr', { 'data-metric': n }, el('th', { scope: 'row' }, n),
        el('td', { class: 'num' }, fmt(x)), el('td', { class: 'num' }, fmt(y)), el('td', { class: 'num' }, delta(n, x, y)));
    })));
}

// The difference B − A: its sign, an arrow for its direction and a word for better or worse (or why there is none).
function delta(name, x, y) {
  if (typeof x !== 'number' || typeof y !== 'number') {
    return el('span', { class: 'note' }, x === undefined ? 'only in B' : y === undefined ? 'only in A' : 'not numbers');
  }
  const d = y - x;
  if (d === 0) return el('span', { class: 'cmp same' }, '= same');
  const better = lowerIsBetter(name) ? d < 0 : d > 0;
  return el('span', { class: `cmp ${better ? 'better' : 'worse'}` },
    `${d > 0 ? '+' : '−'}${fmt(Math.abs(d))} `, el('span', { class: 'sym', 'aria-hidden': 'true' }, d > 0 ? '▲' : '▼'),
    better ? ' better' : ' worse');
}
