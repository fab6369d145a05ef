/**
 * The fault matrix: every scenario `npm run bench:faults` runs, in order. Adding one is a file
 * under scenarios/ exporting a FaultScenario (see harness.ts) and a line here.
 */
import type { FaultScenario } from './harness.js';
import { workerHung } from './scenarios/worker-hung.js';

export const SCENARIOS: FaultScenario[] = [
  workerHung,
];
