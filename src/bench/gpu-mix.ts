/**
 * The GPUs of a simulated fleet: one kind (`h100`, every worker alike) or a mix
 * (`h100:4,a100:4`, four of each). Real fleets are often mixed — a pool grown over two hardware
 * generations, or spot capacity of whatever kind was free — and a policy that takes every worker
 * for as fast as the pool's average sends the slow ones more than they can serve.
 *
 * The workers of a mix are interleaved (h100, a100, h100, a100, …), so no policy gains or loses
 * by a tie-break that favours low worker numbers.
 */
import { listGpus } from '../engine/profiles.js';

export interface GpuShare {
  gpu: string;
  count: number;
}

/**
 * Parse a `--gpu` value. A single name takes `workers` of that GPU; a mix gives each kind its
 * count, and `workers`, if given, must be their sum. Throws with a message naming what is wrong.
 */
export function parseGpuMix(spec: string, workers?: number): GpuShare[] {
  const known = listGpus().map((g) => g.name);
  const check = (name: string): string => {
    const n = name.trim().toLowerCase();
    if (!known.includes(n)) throw new Error(`unknown GPU '${name.trim()}' (known: ${known.join(', ')})`);
    return n;
  };
  if (!spec.includes(':') && !spec.includes(',')) return [{ gpu: check(spec), count: workers ?? 1 }];
  const shares: GpuShare[] = [];
  for (const part of spec.split(',')) {
    const m = /^\s*([^:\s]+)\s*:\s*(\d+)\s*$/.exec(part);
    if (!m) throw new Error(`a GPU mix is NAME:COUNT[,NAME:COUNT…] (e.g. h100:4,a100:4), got '${part.trim()}'`);
    const gpu = check(m[1]!);
    const count = Number(m[2]);
    if (count < 1) throw new Error(`the count of ${gpu} in a GPU mix must be at least 1, got ${count}`);
    if (shares.some((s) => s.gpu === gpu)) throw new Error(`${gpu} is named twice in the GPU mix`);
    shares.push({ gpu, count });
  }
  const total = shares.reduce((a, s) => a + s.count, 0);
  if (workers !== undefined && workers !== total) {
    throw new Error(`the GPU mix '${spec}' has ${total} workers, but --workers is ${workers}`);
  }
  return shares;
}

/** Each worker's GPU, in worker order: the kinds interleaved while each has workers left. */
export function workerGpus(mix: readonly GpuShare[]): string[] {
  const left = mix.map((s) => s.count);
  const out: string[] = [];
  for (let any = true; any; ) {
    any = false;
    for (let k = 0; k < mix.length; k++) {
      if (left[k]! > 0) {
        out.push(mix[k]!.gpu);
        left[k]!--;
        any = true;
      }
    }
  }
  return out;
}

/** The mix as the results name it: `h100` for one kind, `h100:4,a100:4` for several. */
export function gpuMixLabel(mix: readonly GpuShare[]): string {
  return mix.length === 1 ? mix[0]!.gpu : mix.map((s) => `${s.gpu}:${s.count}`).join(',');
}

/** The fleet's mean $ per GPU-hour, from each kind's price. */
export function meanHourCost(mix: readonly GpuShare[], price: (gpu: string) => number): number {
  const total = mix.reduce((a, s) => a + s.count, 0);
  return total > 0 ? mix.reduce((a, s) => a + s.count * price(s.gpu), 0) / total : 0;
}
