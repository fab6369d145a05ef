/**
 * Policy `random`: a uniformly random healthy worker. healthy → random picker. No options.
 */
import { healthyFilter } from '../filters/healthy.js';
import { randomPicker } from '../pickers/random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { PolicyDefinition } from '../types.js';

export const randomPolicy: PolicyDefinition = {
  name: 'random',
  description: 'A uniformly random healthy worker.',
  create: () => new PipelinePolicy({ name: 'random', filters: [healthyFilter], scorers: [], picker: randomPicker }),
};
