/**
 * The KV transfer model of a disaggregated fleet: how long a prompt's KV takes to move from a
 * prefill worker to a decode worker. A link is a bandwidth and a fixed per-transfer latency;
 * a transfer of `bytes` takes latency + bytes / bandwidth.
 *
 * With tensor parallelism each rank holds 1/tp of every token's KV (its share of the KV heads)
 * and NIXL moves each rank's shard over that rank's own NIC or NVLink port, in parallel
 * (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py: one transfer per TP rank), so
 * the time is set by the bytes of one rank: total / tp.
 */

import { linkTransferMs } from '../kv/link-transfer.js';
import { kvBytesPerToken, type KvCacheDtype, type ModelProfile } from './profiles.js';

/** One GPU's path to a peer GPU for KV transfers. */
export interface KvLink {
  /** Preset name, or "custom". */
  name: string;
  /** Bytes per second one rank moves in one direction. */
  bytesPerSecond: number;
  /** Fixed cost of one transfer (descriptor setup, completion notification), ms. */
  latencyMs: number;
}

export type KvLinkPreset = 'nvlink' | 'ib-400' | 'tcp-100';

/**
 * The presets, per GPU and per direction:
 * - nvlink: NVLink 4 (H100 SXM): 900 GB/s total per GPU over 18 links, i.e. 450 GB/s each way
 *   (NVIDIA H100 Tensor Core GPU datasheet). Both workers in one NVLink domain (one HGX node,
 *   or an NVL72 rack). Latency: a few µs for an NVLink RDMA read and its notification.
 * - ib-400: one 400 Gb/s InfiniBand NDR port per GPU (ConnectX-7, as in a DGX H100's 8×400G
 *   compute fabric): 50 GB/s line rate; GPUDirect RDMA reads, ~10 µs per transfer.
 * - tcp-100: 100 Gb/s Ethernet without RDMA (NIXL's UCX over TCP, or an offloading connector):
 *   12.5 GB/s line rate, of which kernel TCP with host staging copies keeps about 80%: 10 GB/s
 *   effective; ~100 µs per transfer for the round trips through the kernel.
 */
export const KV_LINKS: Readonly<Record<KvLinkPreset, KvLink>> = Object.freeze({
  nvlink: { name: 'nvlink', bytesPerSecond: 450e9, latencyMs: 0.005 },
  'ib-400': { name: 'ib-400', bytesPerSecond: 50e9, latencyMs: 0.01 },
  'tcp-100': { name: 'tcp-100', bytesPerSecond: 10e9, latencyMs: 0.1 },
});

export function isKvLinkPreset(name: string): name is KvLinkPreset {
  return Object.prototype.hasOwnProperty.call(KV_LINKS, name);
}

/** A preset by name; unknown names throw with the list of known ones. */
export function resolveKvLink(name: string): KvLink {
  if (!isKvLinkPreset(name)) throw new Error(`unknown KV link "${name}"; known: ${Object.keys(KV_LINKS).join(', ')}`);
  return KV_LINKS[name];
}

/** A link of `gbps` gigabits per second (10^9 bits) and `latencyUs` microseconds per transfer. */
export function customKvLink(gbps: number, latencyUs: number): KvLink {
  if (!(gbps > 0) || !Number.isFinite(gbps)) throw new Error(`KV link bandwidth must be a positive number of Gb/s, got ${gbps}`);
  if (!(latencyUs >= 0) || !Number.isFinite(latencyUs)) throw new Error(`KV link latency must be ≥ 0 µs, got ${latencyUs}`);
  return { name: 'custom', bytesPerSecond: (gbps * 1e9) / 8, latencyMs: latencyUs / 1000 };
}

/** Time to move `bytes` (per rank) over `link`, ms. Zero bytes move nothing and cost nothing. */
export function transferMs(link: KvLink, bytes: number): number {
  if (!(bytes >= 0)) throw new Error(`transfer size must be ≥ 0 bytes, got ${bytes}`);
  return linkTransferMs(bytes, link.bytesPerSecond, link.latencyMs);
}

/**
 * A model's KV transfers over a link: bytes per token (2 × layers × KV heads × head dim × dtype
 * bytes, src/engine/profiles.ts) and the tensor-parallel degree that splits them over ranks.
 */
export class KvTransferModel {
  /** KV bytes of one token over the whole model (all ranks). */
  readonly bytesPerToken: number;

  constructor(
    readonly link: KvLink,
    model: ModelProfile,
    readonly tp = 1,
    kvDtype: KvCacheDtype = 'bf16',
  ) {
    if (!Number.isInteger(tp) || tp < 1) throw new Error(`tp must be a positive integer, got ${tp}`);
    this.bytesPerToken = kvBytesPerToken(model, kvDtype);
  }

  /** Bytes moved for `tokens` tokens of KV, over all ranks. */
  bytes(tokens: number): number {
    return tokens * this.bytesPerToken;
  }

  /** Time to move `tokens` tokens of KV: each rank moves its 1/tp share in parallel, ms. */
  ms(tokens: number): number {
    return transferMs(this.link, this.bytes(tokens) / this.tp);
  }
}
