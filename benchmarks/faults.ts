/**
 * `npm run bench -- faults`: the fault matrix. Each scenario (benchmarks/faults/scenarios/) starts
 * its own simulated workers (child processes) and gateway on 127.0.0.1, breaks something on
 * purpose, and counts every request it sent: answered OK, answered with a documented error,
 * never answered. Bounded and self-stopping; exits 1 if any request went unanswered or a
 * scenario missed a target. The last line is
 *
 *     faults: sent=N ok=N errors=N unanswered=N
 */
import { parseArgs } from 'node:util';
import { Tally } from './faults/harness.js';
import { SCENARIOS } from './faults/index.js';

const HELP = `npm run bench -- faults [options]

Runs the fault matrix against simulated workers and a gateway on 127.0.0.1, and reports for each
scenario the requests sent, answered OK, answered with a documented error and never answered
(which must be 0), plus what the scenario measured and the targets it checks.

Options:
  --only LIST    comma-separated scenario names (default: all)
  --list         list the scenarios and exit
  -h, --help     this text

Scenarios:
${SCENARIOS.map((s) => `  ${s.name.padEnd(22)} ${s.description}`).join('\n')}
`;

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { only: { type: 'string' }, list: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (values.list) {
    for (const s of SCENARIOS) process.stdout.write(`${s.name}\t${s.description}\n`);
    return 0;
  }
  const only = values.only?.split(',').map((s) => s.trim());
  const chosen = only ? SCENARIOS.filter((s) => only.includes(s.name)) : SCENARIOS;
  if (only && chosen.length !== only.length) {
    const known = new Set(SCENARIOS.map((s) => s.name));
    process.stderr.write(`unknown scenario: ${only.filter((n) => !known.has(n)).join(', ')}\n`);
    return 2;
  }
  const total = new Tally();
  let failed = 0;
  for (const s of chosen) {
    const t0 = Date.now();
    process.stdout.write(`\n== ${s.name}: ${s.description}\n`);
    let r;
    try {
      r = await s.run();
    } catch (e) {
      failed++;
      process.stdout.write(`   FAILED to run: ${(e as Error).stack ?? e}\n`);
      continue;
    }
    const t = r.tally;
    total.merge(t);
    process.stdout.write(`   sent=${t.sent} ok=${t.ok} errors=${t.errors} unanswered=${t.unanswered}  (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`);
    if (t.byError.size > 0) process.stdout.write(`   errors: ${[...t.byError].map(([k, v]) => `${k} ×${v}`).join(', ')}\n`);
    if (t.why.length > 0) process.stdout.write(`   unanswered, e.g.: ${t.why.join(' | ')}\n`);
    for (const [k, v] of Object.entries(r.figures)) process.stdout.write(`   ${k}: ${v}\n`);
    for (const [k, ok] of Object.entries(r.checks)) {
      process.stdout.write(`   [${ok ? 'ok' : 'MISSED'}] ${k}\n`);
      if (!ok) failed++;
    }
    if (t.unanswered > 0) failed++;
  }
  process.stdout.write(`\nfaults: sent=${total.sent} ok=${total.ok} errors=${total.errors} unanswered=${total.unanswered}\n`);
  return failed > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`${(e as Error).stack ?? e}\n`);
    process.exit(1);
  },
);
