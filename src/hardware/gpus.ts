/**
 * The GPUs kvgate knows: their memory, bandwidth and compute, and a GPU-hour's price. The engine
 * model is sized and timed from them (src/engine), and the kvgate routing policy takes a worker
 * that declares one of them as its `hardware` to start from that GPU's speed relative to an H100
 * (KvgatePolicy.hardwarePrior), before it has learned the worker's own. Plain data: no imports.
 */

const GiB = 1024 ** 3;

export interface GpuProfile {
  name: string;
  description: string;
  /** Device memory as the driver reports it, in bytes. */
  memoryBytes: number;
  /** Peak memory bandwidth, bytes/s. */
  bandwidth: number;
  /** Peak dense bf16 tensor throughput, FLOP/s. */
  peakFlops: number;
  /** Per-direction GPU-to-GPU bandwidth used by tensor-parallel all-reduces, bytes/s. */
  linkBandwidth: number;
  /**
   * On-demand price of one GPU for one hour, US$: what `kvgate bench` charges a GPU-second at
   * (cost per million output tokens). Sources and assumptions with the table below.
   */
  hourlyUsd: number;
}

/**
 * The GPU profiles, with the price of a GPU-hour each (`hourlyUsd`) — the one table the bench
 * prices GPU time from. Prices are on-demand list prices, rounded, and an assumption: they move
 * often and vary by provider and region by 2× or more (override with `kvgate bench
 * --gpu-hour-cost`).
 *   - a10g $1.00: AWS g5.xlarge (one A10G) on-demand in us-east-1, $1.006/h (instance CPU and
 *     memory included).
 *   - h100 $3.50, a100 $1.80: per-GPU on-demand prices of GPU clouds for SXM parts in 8-GPU
 *     nodes (hyperscalers list several times more per GPU; committed or spot capacity less).
 *   - l4 $0.80, l40s $1.86: AWS g6.xlarge (one L4) and g6e.xlarge (one L40S) on-demand in
 *     us-east-1, instance CPU and memory included, like the A10G's.
 * l4 and l40s are taken from NVIDIA's datasheets (bf16 tensor throughput without sparsity) and the
 * memory nvidia-smi reports; unlike the other three, the time model has not been checked against
 * published vLLM figures on them (docs/simulation.md#the-time-model-against-published-vllm-figures).
 */
export const GPUS: Readonly<Record<string, GpuProfile>> = {
  h100: {
    name: 'h100',
    description: 'NVIDIA H100 SXM 80 GB HBM3',
    memoryBytes: 80 * GiB,
    bandwidth: 3350e9,
    peakFlops: 989e12,
    linkBandwidth: 450e9, // NVLink 4: 900 GB/s bidirectional
    hourlyUsd: 3.5,
  },
  a100: {
    name: 'a100',
    description: 'NVIDIA A100 SXM 80 GB HBM2e',
    memoryBytes: 80 * GiB,
    bandwidth: 2039e9,
    peakFlops: 312e12,
    linkBandwidth: 300e9, // NVLink 3: 600 GB/s bidirectional
    hourlyUsd: 1.8,
  },
  a10g: {
    name: 'a10g',
    description: 'NVIDIA A10G 24 GB GDDR6',
    memoryBytes: 23028 * 1024 ** 2, // what the driver reports for the 24 GB part
    bandwidth: 600e9,
    peakFlops: 125e12,
    linkBandwidth: 25e9, // PCIe 4.0 x16, no NVLink
    hourlyUsd: 1.0,
  },
  l4: {
    name: 'l4',
    description: 'NVIDIA L4 24 GB GDDR6',
    memoryBytes: 23034 * 1024 ** 2, // what the driver reports for the 24 GB part
    bandwidth: 300e9,
    peakFlops: 121e12,
    linkBandwidth: 25e9, // PCIe 4.0 x16, no NVLink
    hourlyUsd: 0.8,
  },
  l40s: {
    name: 'l40s',
    description: 'NVIDIA L40S 48 GB GDDR6',
    memoryBytes: 46068 * 1024 ** 2, // what the driver reports for the 48 GB part
    bandwidth: 864e9,
    peakFlops: 362e12,
    linkBandwidth: 25e9, // PCIe 4.0 x16, no NVLink
    hourlyUsd: 1.86,
  },
};

/**
 * The GPU a label names, or undefined. A label names a GPU when one of its words (split at
 * anything but letters and digits, case ignored) is the GPU's name, or begins with it and goes on
 * with a letter (a variant: `h100sxm`): `h100`, `A100`, `nvidia-h100-80gb-hbm3`, `a10g-spot`,
 * `a100-tp2`, `L40S`. A digit after the name makes another GPU: `l40` is not an L4.
 */
export function knownGpu(label: string): GpuProfile | undefined {
  for (const word of label.toLowerCase().split(/[^a-z0-9]+/)) {
    for (const name in GPUS) {
      if (word.startsWith(name) && (word.length === name.length || !/[0-9]/.test(word[name.length]!))) return GPUS[name];
    }
  }
  return undefined;
}
