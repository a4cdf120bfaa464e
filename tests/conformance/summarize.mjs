// Summarise one run of the MCP conformance suite (server mode).
//
// usage: node summarize.mjs RESULTS_DIR SCENARIO[:unscored]... > checks.tsv
//
// RESULTS_DIR is the suite's `-o` directory, holding one
// `server-<scenario>-<timestamp>/checks.json` per scenario that ran. The
// scenarios are given on the command line (from `conformance list --server
// --requirements REV`; `:unscored` marks one the suite runs but does not
// score) so that one that crashed before writing its checks still counts, as
// one failed check named `<scenario>/did-not-run`.
//
// stdout: one line per decisive check, tab-separated `scenario  check  status`
//         (status SUCCESS or FAILURE; a check id that repeats within a
//         scenario gets `#2`, `#3`... appended), for compare.sh to diff.
//         A check in ANSWERED_AS_JSON that the suite reports as INFO
//         because every answer was JSON counts as SUCCESS (see there).
// stderr: nothing unless the results directory cannot be read.
// It also writes `summary.txt` in RESULTS_DIR: per-scenario lines, the failed
// checks with their messages, and last the line
// `conformance: N passed, M failed`.

import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [dir, ...named] = process.argv.slice(2);
if (!dir || named.length === 0) {
  console.error('usage: node summarize.mjs RESULTS_DIR SCENARIO[:unscored]...');
  process.exit(2);
}

let entries;
try {
  entries = readdirSync(dir);
} catch (error) {
  console.error(`cannot read ${dir}: ${error.message}`);
  process.exit(2);
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function checksOf(scenario) {
  const pattern = new RegExp(`^server-${escape(scenario)}-\\d{4}-\\d{2}-\\d{2}T`);
  const found = entries.filter((name) => pattern.test(name)).sort();
  if (found.length === 0) return null;
  try {
    const checks = JSON.parse(readFileSync(join(dir, found.at(-1), 'checks.json'), 'utf8'));
    return Array.isArray(checks) ? checks : null;
  } catch {
    return null;
  }
}

// Checks the suite scores SUCCESS only when the server streams its answers
// and reports as INFO ("SSE streaming is optional") when every answer is
// JSON. Vigil answers `application/json` when the client accepts it and the
// first message is the response (docs/gateway.md), where its backend
// streamed; the suite itself calls both conformant, so the JSON outcome
// counts as a pass. The predicate says when the INFO is that one.
const ANSWERED_AS_JSON = {
  'server-sse-streams-functional': (check) =>
    check.status === 'INFO' && check.details?.numSseStreams === 0
};

const rows = [];
const report = [];
const failures = [];
let passed = 0;
let failed = 0;

for (const name of named) {
  const [scenario, mark] = name.split(':');
  const note = mark === 'unscored' ? ' (not scored by the suite)' : '';
  const checks = checksOf(scenario) ?? [
    {
      id: 'did-not-run',
      status: 'FAILURE',
      errorMessage: 'the scenario wrote no checks (it crashed or did not run)'
    }
  ];
  const seen = new Map();
  let scenarioPassed = 0;
  let scenarioFailed = 0;
  for (const found of checks) {
    const json = ANSWERED_AS_JSON[found.id]?.(found) ?? false;
    const check = json ? { ...found, status: 'SUCCESS' } : found;
    if (json) report.push(`note ${scenario}/${found.id}: every answer was JSON; counted as passed`);
    if (check.status !== 'SUCCESS' && check.status !== 'FAILURE') continue;
    const count = (seen.get(check.id) ?? 0) + 1;
    seen.set(check.id, count);
    const id = count === 1 ? check.id : `${check.id}#${count}`;
    rows.push(`${scenario}\t${id}\t${check.status}`);
    if (check.status === 'SUCCESS') {
      scenarioPassed += 1;
    } else {
      scenarioFailed += 1;
      failures.push(`  ${scenario}/${id}: ${check.errorMessage ?? check.description ?? ''}`);
    }
  }
  const warnings = checks.filter((c) => c.status === 'WARNING').length;
  passed += scenarioPassed;
  failed += scenarioFailed;
  report.push(
    `${scenarioFailed === 0 ? 'ok  ' : 'FAIL'} ${scenario}: ${scenarioPassed} passed, ${scenarioFailed} failed` +
      (warnings ? `, ${warnings} warnings` : '') +
      note
  );
}

if (failures.length > 0) report.push('failed checks:', ...failures);
report.push(`conformance: ${passed} passed, ${failed} failed`);
writeFileSync(join(dir, 'summary.txt'), report.join('\n') + '\n');
process.stdout.write(rows.map((row) => row + '\n').join(''));
