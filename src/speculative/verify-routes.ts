/**
 * Which verification request each target worker takes (verify-call.ts): SGLang workers their
 * /generate; vLLM workers /inference/v1/generate until one refuses it, then /v1/completions —
 * remembered per worker for as long as the gateway's cascade pools live.
 */
import type { WorkerState } from '../fleet/worker-state.js';

/** How a verification reached the target. */
export type VerifyRoute = 'sglang-generate' | 'vllm-generate' | 'vllm-completions';

export class VerifyRoutes {
  private readonly completionsOnly = new Set<string>();

  routeFor(w: Pick<WorkerState, 'id' | 'engine'>): VerifyRoute {
    if (w.engine === 'sglang') return 'sglang-generate';
    return this.completionsOnly.has(w.id) ? 'vllm-completions' : 'vllm-generate';
  }

  /** The worker refused the cheap route: the old one from now on. Returns false if already known. */
  refuse(workerId: string): boolean {
    if (this.completionsOnly.has(workerId)) return false;
    this.completionsOnly.add(workerId);
    return true;
  }
}
