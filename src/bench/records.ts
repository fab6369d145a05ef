/**
 * `kvgate bench --records FILE`: every completed request of a policy's plain run (not its
 * capacity probes), one CSV row each, for the per-request questions a summary cannot answer —
 * which requests form a tail, on which worker, with how much of their prompt cached.
 *
 * With one policy the rows go to FILE; with several, each policy's to FILE with `-POLICY`
 * inserted before the extension (records.csv → records-kvgate.csv), so runs on parallel threads
 * never write one file together.
 */
import { writeFileSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { PRIORITY_CLASSES } from '../admission/classes.js';
import type { SimResult } from '../sim/fleet-sim.js';

const RECORD_COLUMNS = ['arrival_ms', 'prompt_tokens', 'cached_tokens', 'output_tokens', 'ttft_ms', 'tpot_ms', 'e2e_ms', 'worker', 'source', 'class'] as const;

/** Where `policy`'s records go: FILE itself, or with several policies run, FILE named by policy. */
export function recordsPath(file: string, policy: string, perPolicy: boolean): string {
  if (!perPolicy) return file;
  const ext = extname(file);
  return join(dirname(file), `${basename(file, ext)}-${policy}${ext}`);
}

const SOURCES = ['worker', 'cache', 'follower'] as const;
const ms = (x: number): string => (Math.round(x * 1000) / 1000).toString();

/** The run's completed requests as CSV text, in completion order (header first). */
function recordsCsv(r: SimResult): string {
  const c = r.completed;
  const lines: string[] = [RECORD_COLUMNS.join(',')];
  for (let i = 0; i < c.arrival.length; i++) {
    const arrival = c.arrival[i]!;
    const ttft = c.firstToken[i]! - arrival;
    const e2e = c.finish[i]! - arrival;
    const out = c.outputTokens[i]!;
    const w = c.worker[i]!;
    const source = SOURCES[c.fromCache?.[i] ?? 0] ?? 'worker';
    // A run without priority classes leaves every request standard.
    const cls = PRIORITY_CLASSES[c.cls?.[i] ?? 1] ?? 'standard';
    // TPOT as the summary counts it: decode time over the tokens after the first (none for one token or a cache hit).
    const tpot = out > 1 && source !== 'cache' ? ms((e2e - ttft) / (out - 1)) : '';
    lines.push(`${ms(arrival)},${c.promptTokens[i]},${c.cachedTokens[i]},${out},${ms(ttft)},${tpot},${ms(e2e)},${w >= 0 ? (r.workers[w]?.id ?? w) : ''},${source},${cls}`);
  }
  return lines.join('\n') + '\n';
}

export function writeRecords(file: string, r: SimResult): void {
  writeFileSync(file, recordsCsv(r));
}
