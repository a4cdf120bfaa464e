// One client-mode run of one scenario of the MCP conformance suite, as one
// tab-separated line for compare.sh.
//
// usage: node report.mjs RESULTS_DIR SCENARIO SUITE_EXIT_STATUS
//
// RESULTS_DIR is the suite's `-o` directory of a `client --scenario
// SCENARIO` run, holding `<scenario>-<timestamp>/checks.json` (and the
// client's stdout.txt / stderr.txt). stdout:
//   verdict  passed  failed  warnings  reason
// verdict is `passed` when the suite exited 0 and no check failed, else
// `failed`; reason names the failed checks with their messages (or says
// that the scenario wrote no checks, or that the suite flagged the client:
// it exited non-zero or timed out), tabs and newlines flattened.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [dir, scenario, status] = process.argv.slice(2);
if (!dir || !scenario || status === undefined) {
  console.error('usage: node report.mjs RESULTS_DIR SCENARIO SUITE_EXIT_STATUS');
  process.exit(2);
}

const flat = (text) => String(text).replace(/\s+/g, ' ').trim();
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const leaf = scenario.split('/').at(-1);
const parent = join(dir, ...scenario.split('/').slice(0, -1));

let checks = null;
try {
  const pattern = new RegExp(`^${escape(leaf)}-\\d{4}-\\d{2}-\\d{2}T`);
  const found = readdirSync(parent).filter((name) => pattern.test(name)).sort();
  if (found.length > 0) {
    checks = JSON.parse(readFileSync(join(parent, found.at(-1), 'checks.json'), 'utf8'));
  }
} catch {
  checks = null;
}

if (!Array.isArray(checks)) {
  console.log(['failed', 0, 0, 0, `the scenario wrote no checks (suite exit status ${status})`].join('\t'));
  process.exit(0);
}

const count = (s) => checks.filter((c) => c.status === s).length;
const failures = checks
  .filter((c) => c.status === 'FAILURE')
  .map((c) => `${c.id}: ${flat(c.errorMessage ?? c.description ?? '')}`.slice(0, 300));
const passed = status === '0' && failures.length === 0 && count('SUCCESS') > 0;
let reason = failures.join('; ');
if (!passed && failures.length === 0) {
  reason = count('SUCCESS') === 0
    ? `no check passed (suite exit status ${status})`
    : `the suite failed the run although no check failed (exit status ${status}: the client exited non-zero or timed out)`;
}
console.log([passed ? 'passed' : 'failed', count('SUCCESS'), count('FAILURE'), count('WARNING'), reason].join('\t'));
