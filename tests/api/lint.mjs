// The OpenAPI lint (lint.sh): Redocly's lint engine (@redocly/openapi-core,
// what Redocly CLI runs, without its 200 MB of docs tooling) with
// redocly.yaml and its ignore file; prints the problems, exits 1 on any
// error or warning that is not ignored.
import { loadConfig, lint, formatProblems, getTotals } from '@redocly/openapi-core';

const here = new URL('.', import.meta.url).pathname;
const config = await loadConfig({ configPath: `${here}redocly.yaml` });
const problems = await lint({ ref: `${here}../../api/openapi.json`, config });
const shown = problems.filter((p) => !p.ignored);
const totals = getTotals(problems);
if (shown.length > 0) {
  formatProblems(shown, { format: 'stylish', totals, version: 'openapi-core' });
  process.exit(1);
}
console.log(`openapi-lint: clean (${totals.ignored} problem${totals.ignored === 1 ? '' : 's'} ignored by name)`);
