/**
 * Policy `least-load`: the healthy worker with the fewest running + waiting requests (last scrape
 * plus the gateway's own in-flight count). healthy → load scorer (weight 1) → max-score picker
 * (random among equals). No options.
 */
import { z } from 'zod';
import { healthyFilter } from '../filters/healthy.js';
import { maxScorePicker } from '../pickers/max-score.js';
import { PipelinePolicy } from '../pipeline.js';
import { leastLoadScorer } from '../scorers/least-load.js';
import type { PolicyDefinition } from '../types.js';

export const leastLoadPolicy: PolicyDefinition = {
  name: 'least-load',
  description: 'Fewest running + waiting requests (last scrape plus the gateway’s own in-flight count).',
  options: z.strictObject({}),
  create: () =>
    new PipelinePolicy({
      name: 'least-load',
      filters: [healthyFilter],
      scorers: [{ scorer: leastLoadScorer, weight: 1 }],
      picker: maxScorePicker,
      readsPromptTokens: false,
    }),
};
