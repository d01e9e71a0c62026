// Ferry console: acting (stop, retry, continue, submit, a deployment's
// timer…). Every action is a POST/PATCH with the person's token, so the API
// records the token's name as the actor in the run's events; the result
// (done, or the API's error message) is written to the page's result region
// (role=status, read out by screen readers). Who the token is comes from
// GET /whoami, asked once per token: a viewer's buttons are disabled with
// the reason beside them, and the API refuses the viewer all the same (403),
// which the result region shows if a disabled button is forced.

import { el, call, callJSON, token, quiet, Unauthorized } from './lib.js';

let me = null; // {token, answer: a promise of the whoami}: callers at the same time share one request

// {name, role, can_act, can_deploy, can_admin} of the token in use.
export function whoami() {
  const t = token();
  if (me && me.token === t) return me.answer;
  const answer = callJSON('/whoami').catch((e) => {
    if (e instanceof Unauthorized) { me = null; throw e; }
    // an older daemon without /whoami: offer the buttons, the API decides
    return { name: 'this token', role: 'unknown', can_act: true, can_deploy: true, can_admin: false };
  });
  me = { token: t, answer };
  return answer;
}

export function forgetWhoami() { me = null; }

// The region where actions report: one per page.
export function resultRegion(id = 'action-result') {
  return el('p', { class: 'result', id, role: 'status', 'aria-live': 'polite' });
}

// A line for a viewer: what the token may not do, said once beside the buttons.
export function roleNote(who) {
  if (who.can_act) return null;
  return el('p', { class: 'note', id: 'role-note' },
    `Signed in as ${who.name} (${who.role}): you can look at everything here, not act. Ask for a token with a role that may.`);
}

// A button for an action: disabled (with the reason as its title) when the token may not act.
export function actionButton(label, who, onclick, attrs = {}) {
  return el('button', {
    type: 'button', class: 'action', ...attrs, disabled: !who.can_act || attrs.disabled,
    title: who.can_act ? attrs.title : `${who.name} is a ${who.role} token: it cannot act`, onclick,
  }, label);
}

// Runs one action: method path with a JSON body; says the outcome in `out`. The answer's JSON, or null on failure.
export async function act({ btn, out, what, path, method = 'POST', body = {}, signal, who }) {
  if (btn) btn.disabled = true;
  out.classList.remove('error', 'ok');
  out.textContent = `${what}…`;
  try {
    const res = await call(path, { method, signal, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    let json = null;
    try { json = await res.json(); } catch { /* no body */ }
    if (!res.ok) {
      const msg = json && json.error ? json.error.message : `HTTP ${res.status}`;
      throw new Error(res.status === 403 ? `refused: ${msg}` : msg);
    }
    out.classList.add('ok');
    out.textContent = `✓ ${what}: done${who && who.name ? `, as ${who.name}` : ''}.`;
    return json;
  } catch (e) {
    if (quiet(e)) return null;
    out.classList.add('error');
    out.textContent = `✗ ${what}: ${e.message}`;
    return null;
  } finally {
    if (btn) btn.disabled = !(who ? who.can_act : true);
  }
}
