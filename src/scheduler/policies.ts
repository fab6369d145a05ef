/**
 * Named policies: each is a configuration of the filter → scorer → picker pipeline.
 * New policies register here so the gateway (`policy:` in the config) and `kvgate bench
 * --policy` find them by the same name.
 */
import { healthyFilter } from './filters.js';
import { maxScorePicker, randomPicker, roundRobinPicker } from './pickers.js';
import { PipelinePolicy } from './pipeline.js';
import { leastLoadScorer } from './scorers.js';

import { registerPolicy } from './policy-registry.js';
// KV-cache-aware policies (kvgate's own and the peers' baselines) register themselves on import.
import './kv-policies.js';

export {
  registerPolicy,
  createPolicy,
  policyNames,
  describePolicies,
  type PolicyOptions,
  type PolicyFactory,
} from './policy-registry.js';

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
