// Ferry console: submit a run of a registered workflow (#/submit, or
// #/submit?workflow=NAME). The form is built from the params the workflow
// declares (GET /workflows gives them): a string is a text box (with its
// pattern), an integer or a number a number box (with min and max), a
// boolean a checkbox, an enum a list of its values; each starts at its
// default. The browser checks what it can; the API checks everything again
// and its message (naming the param) is shown. On success the run opens.

import { el, callJSON, setView, viewSignal } from './lib.js';
import { whoami, resultRegion, roleNote, actionButton, act } from './actions.js';

// The input for one declared param, and a function reading its value back (undefined: leave the default).
function paramField(name, decl) {
  const id = `param-${name}`;
  const type = decl.type || 'string';
  const def = decl.default;
  let input, read;
  if (type === 'boolean') {
    input = el('input', { id, name, type: 'checkbox', checked: def === true || def === 'true' });
    read = () => input.checked;
  } else if (type === 'enum') {
    input = el('select', { id, name }, (decl.values || []).map((v) => el('option', { value: String(v), selected: String(v) === String(def) }, String(v))));
    read = () => input.value;
  } else if (type === 'integer' || type === 'number') {
    input = el('input', { id, name, type: 'number', step: type === 'integer' ? '1' : 'any', min: decl.min, max: decl.max,
      value: def ?? '', inputmode: type === 'integer' ? 'numeric' : 'decimal' });
    read = () => (input.value === '' ? undefined : Number(input.value));
  } else {
    input = el('input', { id, name, type: 'text', value: def ?? '', pattern: decl.pattern, spellcheck: 'false' });
    read = () => input.value;
  }
  const hint = [type, decl.min !== undefined ? `≥ ${decl.min}` : null, decl.max !== undefined ? `≤ ${decl.max}` : null,
    decl.pattern ? `matching ${decl.pattern}` : null, def !== undefined ? `default ${JSON.stringify(def)}` : 'required']
    .filter(Boolean).join(', ');
  return {
    name, read,
    row: el('div', { class: 'field' }, el('label', { for: id }, name), input,
      el('span', { class: 'note', id: `${id}-hint` }, decl.description ? `${decl.description} (${hint})` : hint)),
  };
}

export async function submitPage(params) {
  const signal = viewSignal();
  const who = await whoami();
  const list = (await callJSON('/workflows', { signal })).workflows || [];
  // the newest version of each name (the list is newest first)
  const byName = new Map();
  for (const w of list) if (!byName.has(w.name)) byName.set(w.name, w);
  const out = resultRegion();
  if (!byName.size) {
    setView(el('h1', {}, 'Submit a run'), el('p', {}, 'No workflow is registered: register one with ',
      el('code', {}, 'ferry workflow register FILE.yaml'), '.'));
    return;
  }
  const pick = el('select', { id: 'submit-workflow', name: 'workflow' },
    [...byName.keys()].map((n) => el('option', { value: n, selected: n === params.get('workflow') }, n)));
  const fields = el('div', { id: 'submit-params' });
  const about = el('p', { class: 'note', id: 'submit-about' });
  const noCache = el('input', { type: 'checkbox', id: 'submit-no-cache' });
  let current = [];
  function build() {
    const w = byName.get(pick.value);
    about.textContent = `${w.description ? `${w.description} — ` : ''}${w.steps} steps, version ${String(w.hash).slice(0, 12)}.`;
    current = Object.entries(w.params || {}).map(([n, d]) => paramField(n, d || {}));
    fields.replaceChildren(current.length ? el('h2', {}, 'Params') : el('p', { class: 'note' }, 'This workflow declares no params.'),
      ...current.map((f) => f.row));
  }
  pick.addEventListener('change', build);
  build();
  const form = el('form', { id: 'submit-form', novalidate: false });
  const go = actionButton('Submit', who, null, { id: 'submit-go', type: 'submit' });
  go.setAttribute('type', 'submit');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!form.reportValidity()) return;
    const values = {};
    for (const f of current) {
      const v = f.read();
      if (v !== undefined) values[f.name] = v;
    }
    const body = { workflow: pick.value, params: values, ...(noCache.checked ? { no_cache: true } : {}) };
    const r = await act({ btn: go, out, what: `Submit ${pick.value}`, path: '/runs', body, signal, who });
    if (r && r.id) location.hash = `#/runs/${r.id}`;
  });
  form.append(el('label', { for: 'submit-workflow' }, 'Workflow'), pick, about, fields,
    el('label', { class: 'inline', for: 'submit-no-cache' }, noCache, ' without the cache'), el('div', {}, go));
  setView(el('h1', {}, 'Submit a run'), roleNote(who), form, out);
}
