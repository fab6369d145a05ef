/**
 * The host's share of `npm run bench -- epp`'s latency at a moderate rate, in a process of its own
 * on the EPP's core: a fixed piece of work of about a decision's size (one of the benchmark's
 * request bodies parsed and its last message, the request's own question, tokenized with the
 * estimate tokenizer, as the EPP does while it keeps the ids of the long shared system message;
 * none of the EPP's code) timed back to back, then once every `gapMs` with the process asleep in between, as an
 * EPP at 200 req/s is. On a machine whose idle cores lose their caches (a virtual machine sharing
 * its host, power states), the same work takes longer after each sleep, and so does every
 * decision at that rate: the ratio says how much of the rate's latency is the host's.
 *
 * Argument: a file holding the JSON HostControlSpec. Writes one JSON HostControlResult line.
 */
import { readFileSync } from 'node:fs';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { quantile } from '../harness.js';

export interface HostControlSpec {
  bodies: string[];
  /** Time between two pieces of work in the paced run, ms. */
  gapMs: number;
  /** Pieces of work timed in each run (after as many untimed to warm up). */
  count: number;
}

export interface HostControlResult {
  backToBack: { p50Us: number; p99Us: number };
  paced: { p50Us: number; p99Us: number };
}

let sink = 0;

/** Parse a body and tokenize its question: the bulk of a decision's own work on its prompt. */
function work(body: string): void {
  const req = JSON.parse(body) as { messages: Array<{ content: string }> };
  sink += estimateTokenizer.encode(req.messages.at(-1)!.content).length;
}

async function timed(bodies: string[], count: number, gapMs: number): Promise<{ p50Us: number; p99Us: number }> {
  const us: number[] = [];
  for (let i = 0; i < 2 * count; i++) {
    const t0 = process.hrtime.bigint();
    work(bodies[i % bodies.length]!);
    const t1 = process.hrtime.bigint();
    if (i >= count) us.push(Number(t1 - t0) / 1000);
    if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
  }
  return { p50Us: quantile(us, 0.5), p99Us: quantile(us, 0.99) };
}

async function main(): Promise<void> {
  const spec = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as HostControlSpec;
  const backToBack = await timed(spec.bodies, spec.count, 0);
  const paced = await timed(spec.bodies, spec.count, spec.gapMs);
  const out: HostControlResult = { backToBack, paced };
  process.stdout.write(JSON.stringify(out) + (sink < 0 ? ' ' : '') + '\n');
}

void main();
