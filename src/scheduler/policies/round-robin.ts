/**
 * Policy `round-robin`: each healthy worker in turn, blind to load and cache (what a Kubernetes
 * Service does). healthy → round-robin picker. No options.
 */
import { z } from 'zod';
import { healthyFilter } from '../filters/healthy.js';
import { roundRobinPicker } from '../pickers/round-robin.js';
import { PipelinePolicy } from '../pipeline.js';
import type { PolicyDefinition } from '../types.js';

export const roundRobinPolicy: PolicyDefinition = {
  name: 'round-robin',
  description: 'Each healthy worker in turn, blind to load and cache (a Kubernetes Service).',
  options: z.strictObject({}),
  create: () => new PipelinePolicy({ name: 'round-robin', filters: [healthyFilter], scorers: [], picker: roundRobinPicker(), readsPromptTokens: false }),
};
