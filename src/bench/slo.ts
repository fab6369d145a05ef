/**
 * The per-request SLO rule shared by goodput and attainment (and so by the capacity search):
 *
 *   TTFT ≤ ttftMs + ttftPer1kMs × prompt tokens / 1000   and   TPOT ≤ tpotMs
 *
 * Each part applies only when given; the per-1k allowance on its own means a base of 0 ms. A
 * one-token answer has no TPOT and meets any TPOT SLO. A request that was rejected or shed has no
 * latency at all and misses the SLO (it counts in attainment's denominator, not in goodput).
 */

export interface Slo {
  /** TTFT bound, ms (the base when ttftPer1kMs is set). */
  ttftMs?: number;
  /** Extra TTFT allowed per 1,000 prompt tokens, ms (long prompts take longer to prefill). */
  ttftPer1kMs?: number;
  tpotMs?: number;
}

/** Whether any part of the SLO is set (without one, attainment is not defined). */
export function hasSlo(s: Slo): boolean {
  return s.ttftMs !== undefined || s.ttftPer1kMs !== undefined || s.tpotMs !== undefined;
}

/** TTFT bound for a prompt of `promptTokens` tokens, or Infinity when there is none. */
export function ttftBoundMs(s: Slo, promptTokens: number): number {
  if (s.ttftMs === undefined && s.ttftPer1kMs === undefined) return Infinity;
  return (s.ttftMs ?? 0) + ((s.ttftPer1kMs ?? 0) * promptTokens) / 1000;
}

/** Does a completed request meet the SLO? `tpotMs` is undefined for a one-token answer. */
export function meetsSlo(s: Slo, ttftMs: number, tpotMs: number | undefined, promptTokens: number): boolean {
  if (ttftMs > ttftBoundMs(s, promptTokens)) return false;
  return s.tpotMs === undefined || tpotMs === undefined || tpotMs <= s.tpotMs;
}

/** "TTFT ≤ 1000 ms + 100 ms/1k prompt tokens, TPOT ≤ 50 ms" (empty when no SLO is set). */
export function describeSlo(s: Slo): string {
  const parts: string[] = [];
  if (s.ttftMs !== undefined || s.ttftPer1kMs !== undefined) {
    const base = s.ttftMs !== undefined ? `${s.ttftMs} ms` : '';
    const per = s.ttftPer1kMs !== undefined ? `${s.ttftPer1kMs} ms/1k prompt tokens` : '';
    parts.push(`TTFT ≤ ${[base, per].filter(Boolean).join(' + ')}`);
  }
  if (s.tpotMs !== undefined) parts.push(`TPOT ≤ ${s.tpotMs} ms`);
  return parts.join(', ');
}
