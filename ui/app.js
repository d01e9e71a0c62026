// Ferry console: a single page over the REST API (/api/v1), served by ferryd
// at /ui/ under a strict CSP (no inline script or style, only this origin).
// Routes live in the hash, one row per page in ROUTES (to add a page: a
// module exporting its page function, a row here and a link in index.html's
// nav). The bearer token the person enters is kept in sessionStorage (this
// tab only). Pages read live updates from Server-Sent Events, never by polling.

import { $, token, setToken, showLogin, newView, showError } from './lib.js';
import { runsPage, runPage } from './runs.js';
import { comparePage } from './compare.js';
import { submitPage } from './submit.js';
import { modelsPage, modelPage } from './models.js';
import { deploymentsPage, deploymentPage } from './deployments.js';
import { schedulesPage, schedulePage } from './schedules.js';
import { whoami, forgetWhoami } from './actions.js';

// [pattern of the hash's path, title, page(match, params)]: the first match wins; the last row is the default
const ROUTES = [
  [/^\/runs\/(\d+)$/, (m) => `Run #${m[1]}`, (m) => runPage(m[1])],
  [/^\/compare$/, () => 'Runs compared', (m, params) => comparePage(params)],
  [/^\/models\/([^/]+)$/, (m) => `Model ${decodeURIComponent(m[1])}`, (m) => modelPage(decodeURIComponent(m[1]))],
  [/^\/models$/, () => 'Models', () => modelsPage()],
  [/^\/deployments\/(\d+)$/, (m) => `Deployment ${m[1]}`, (m) => deploymentPage(m[1])],
  [/^\/deployments$/, () => 'Deployments', () => deploymentsPage()],
  [/^\/schedules\/(\d+)$/, (m) => `Schedule ${m[1]}`, (m) => schedulePage(m[1])],
  [/^\/schedules$/, () => 'Schedules', () => schedulesPage()],
  [/^\/submit$/, () => 'Submit a run', (m, params) => submitPage(params)],
  [/^/, () => 'Runs', (m, params) => runsPage(params)],
];

async function route() {
  newView();
  if (!token()) { showLogin(); return; }
  $('#login').hidden = true;
  $('#signout').hidden = false;
  whoami().then((w) => { $('#who').textContent = `${w.name} (${w.role})`; }, () => {});
  const hash = location.hash || '#/runs';
  const [path, query] = hash.slice(1).split('?');
  const params = new URLSearchParams(query || '');
  for (const a of document.querySelectorAll('.top nav a')) {
    if (path.startsWith(a.getAttribute('href').slice(1))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  for (const [re, title, page] of ROUTES) {
    const m = path.match(re);
    if (!m) continue;
    document.title = `${title(m)} — Ferry`;
    try {
      await page(m, params);
    } catch (e) {
      showError(e);
    }
    return;
  }
}

$('#login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const t = $('#token').value.trim();
  if (!t) return;
  setToken(t);
  $('#login-error').hidden = true;
  route();
});
$('#signout').addEventListener('click', () => { forgetWhoami(); $('#who').textContent = ''; showLogin('Token forgotten.'); });
window.addEventListener('hashchange', route);
route();
