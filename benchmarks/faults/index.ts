/**
 * The fault matrix: every scenario `npm run bench:faults` runs, in order. Adding one is a file
 * under scenarios/ exporting a FaultScenario (see harness.ts) and a line here.
 */
import type { FaultScenario } from './harness.js';
import { admissionBurst } from './scenarios/admission-burst.js';
import { allDown } from './scenarios/all-down.js';
import { crossSitePost } from './scenarios/cross-site-post.js';
import { crossTenantProbe } from './scenarios/cross-tenant-probe.js';
import { longPrompt } from './scenarios/long-prompt.js';
import { requestKillsWorker } from './scenarios/request-kills-worker.js';
import { truncatedStream } from './scenarios/truncated-stream.js';
import { oversizedAsks } from './scenarios/oversized-asks.js';
import { stalledClients } from './scenarios/stalled-clients.js';
import { massDisconnect } from './scenarios/mass-disconnect.js';
import { metricsGarbage } from './scenarios/metrics-garbage.js';
import { worker500s } from './scenarios/worker-500s.js';
import { workerHung } from './scenarios/worker-hung.js';
import { workerKilled } from './scenarios/worker-killed.js';
import { workerRestarted } from './scenarios/worker-restarted.js';

export const SCENARIOS: FaultScenario[] = [
  workerKilled,
  workerHung,
  worker500s,
  metricsGarbage,
  workerRestarted,
  allDown,
  massDisconnect,
  // Admission control (issue 10).
  admissionBurst,
  // Abuse (issue 11).
  stalledClients,
  crossTenantProbe,
  crossSitePost,
  oversizedAsks,
  // Hardening round two (issue 48).
  longPrompt,
  requestKillsWorker,
  truncatedStream,
];
