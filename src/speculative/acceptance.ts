/**
 * Acceptance-rate estimates per model and prompt class.
 *
 * What is estimated is α, the probability that one draft token passes verification given that the
 * ones before it did — the α of the expected-tokens-per-round formula (1 − α^(k+1))/(1 − α). A
 * round that proposes m tokens and accepts a of them tested a + 1 tokens if it rejected one and a
 * if it accepted all: α̂ = Σ accepted / Σ tested. (vLLM's "draft acceptance rate",
 * accepted/proposed, counts the tokens after a rejection as failures too and so reads lower than
 * α: with i.i.d. acceptance it is (E − 1)/k, E = (1 − α^(k+1))/(1 − α); vllm-project/vllm
 * vllm/v1/spec_decode/metrics.py.) Each class's counts decay with a half-life in tested tokens
 * (`controller.halfLifeTokens`), so the estimate follows a prompt domain whose acceptance shifts.
 */

export interface AcceptanceEntry {
  model: string;
  cls: string;
  alpha: number;
  /** Decayed number of tested tokens behind the estimate. */
  weight: number;
}

interface Counts {
  accepted: number;
  tested: number;
}

export class AcceptanceTracker {
  private readonly byKey = new Map<string, Counts & { model: string; cls: string }>();
  private readonly decay: number;

  /** `halfLifeTokens`: tested tokens after which an old observation counts half. */
  constructor(halfLifeTokens = 500) {
    this.decay = Math.pow(0.5, 1 / halfLifeTokens);
  }

  observe(model: string, cls: string, accepted: number, rejected: boolean): void {
    this.observeCounts(model, cls, accepted, accepted + (rejected ? 1 : 0));
  }

  /** Several rounds at once: `accepted` of `tested` draft tokens passed (tested ≥ accepted). */
  observeCounts(model: string, cls: string, accepted: number, tested: number): void {
    if (!(tested > 0)) return;
    const key = `${model}\u0000${cls}`;
    let c = this.byKey.get(key);
    if (!c) this.byKey.set(key, (c = { model, cls, accepted: 0, tested: 0 }));
    const f = Math.pow(this.decay, tested);
    c.accepted = c.accepted * f + accepted;
    c.tested = c.tested * f + tested;
  }

  /** α̂ for a class, or null before any observation. */
  alpha(model: string, cls: string): number | null {
    const c = this.byKey.get(`${model}\u0000${cls}`);
    return c && c.tested > 0 ? c.accepted / c.tested : null;
  }

  /** Decayed tested tokens behind the class's estimate (0 if none). */
  weight(model: string, cls: string): number {
    return this.byKey.get(`${model}\u0000${cls}`)?.tested ?? 0;
  }

  *entries(): Iterable<AcceptanceEntry> {
    for (const c of this.byKey.values()) if (c.tested > 0) yield { model: c.model, cls: c.cls, alpha: c.accepted / c.tested, weight: c.tested };
  }
}

/** Expected tokens emitted by a round of k draft tokens at per-token acceptance α: (1 − α^(k+1))/(1 − α). */
export function expectedTokensPerRound(alpha: number, k: number): number {
  if (alpha >= 1) return k + 1;
  return (1 - Math.pow(alpha, k + 1)) / (1 - alpha);
}
