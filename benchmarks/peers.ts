/**
 * The peer routers' policies kvgate is compared with, in every benchmark that compares it with
 * them (policies, light-load): one list, so a peer added or renamed reaches all of them.
 */
export const PEERS: readonly string[] = ['sglang-cache-aware', 'llm-d', 'llm-d-precise', 'llm-d-legacy', 'dynamo', 'aibrix'];
