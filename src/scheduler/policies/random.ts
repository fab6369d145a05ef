/**
 * Policy `random`: a uniformly random healthy worker. healthy → random picker. No options.
 */
import { z } from 'zod';
import { healthyFilter } from '../filters/healthy.js';
import { randomPicker } from '../pickers/random.js';
import { PipelinePolicy } from '../pipeline.js';
import type { PolicyDefinition } from '../types.js';

export const randomPolicy: PolicyDefinition = {
  name: 'random',
  description: 'A uniformly random healthy worker.',
  options: z.strictObject({}),
  create: () => new PipelinePolicy({ name: 'random', filters: [healthyFilter], scorers: [], picker: randomPicker }),
};
