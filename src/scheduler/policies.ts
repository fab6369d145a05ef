/**
 * Named policies: each is a configuration of the filter → scorer → picker pipeline.
 * New policies register here so the gateway (`policy:` in the config) and `kvgate bench
 * --policy` find them by the same name.
 */
import { healthyFilter } from './filters.js';
import { maxScorePicker, randomPicker, roundRobinPicker } from './pickers.js';
import { PipelinePolicy } from './pipeline.js';
import { leastLoadScorer } from './scorers.js';
import type { Policy } from './types.js';

/** Options a policy factory may read; unknown keys are ignored by policies that do not use them. */
export type PolicyOptions = Record<string, unknown>;
export type PolicyFactory = (options?: PolicyOptions) => Policy;

const registry = new Map<string, { factory: PolicyFactory; description: string }>();

export function registerPolicy(name: string, description: string, factory: PolicyFactory): void {
  registry.set(name, { factory, description });
}

export function createPolicy(name: string, options?: PolicyOptions): Policy {
  const entry = registry.get(name);
  if (!entry) {
    throw new Error(`unknown policy '${name}' (known: ${[...registry.keys()].join(', ')})`);
  }
  return entry.factory(options);
}

export function policyNames(): string[] {
  return [...registry.keys()];
}

export function describePolicies(): Array<{ name: string; description: string }> {
  return [...registry].map(([name, e]) => ({ name, description: e.description }));
}

registerPolicy(
  'round-robin',
  'Each healthy worker in turn, blind to load and cache (a Kubernetes Service).',
  () =>
    new PipelinePolicy({ name: 'round-robin', filters: [healthyFilter], scorers: [], picker: roundRobinPicker() }),
);

registerPolicy(
  'random',
  'A uniformly random healthy worker.',
  () => new PipelinePolicy({ name: 'random', filters: [healthyFilter], scorers: [], picker: randomPicker }),
);

registerPolicy(
  'least-load',
  'Fewest running + waiting requests (last scrape plus the gateway’s own in-flight count).',
  () =>
    new PipelinePolicy({
      name: 'least-load',
      filters: [healthyFilter],
      scorers: [{ scorer: leastLoadScorer, weight: 1 }],
      picker: maxScorePicker,
    }),
);
