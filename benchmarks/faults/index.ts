/**
 * The fault matrix: every scenario `npm run bench -- faults` runs, in order. Adding one is a file
 * under scenarios/ exporting a FaultScenario (see harness.ts) and a line here.
 */
import type { FaultScenario } from './harness.js';
import { admissionBurst } from './scenarios/admission-burst.js';
import { adminNames } from './scenarios/admin-names.js';
import { allDown } from './scenarios/all-down.js';
import { crossSitePost } from './scenarios/cross-site-post.js';
import { draftHung } from './scenarios/draft-hung.js';
import { crossTenantProbe } from './scenarios/cross-tenant-probe.js';
import { embeddingsFlood } from './scenarios/embeddings-flood.js';
import { longPrompt } from './scenarios/long-prompt.js';
import { requestKillsWorker } from './scenarios/request-kills-worker.js';
import { truncatedStream } from './scenarios/truncated-stream.js';
import { oversizedAsks } from './scenarios/oversized-asks.js';
import { queuePriority } from './scenarios/queue-priority.js';
import { replicaKilled } from './scenarios/replica-killed.js';
import { responsesOwner } from './scenarios/responses-owner.js';
import { stalledClients } from './scenarios/stalled-clients.js';
import { massDisconnect } from './scenarios/mass-disconnect.js';
import { metricsAuth } from './scenarios/metrics-auth.js';
import { metricsGarbage } from './scenarios/metrics-garbage.js';
import { nestedBodies } from './scenarios/nested-bodies.js';
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
  // Shared state and priority (issue 48).
  responsesOwner,
  queuePriority,
  replicaKilled,
  // Request bodies (issue 48).
  embeddingsFlood,
  nestedBodies,
  // Abuse, round two (issue 48).
  adminNames,
  metricsAuth,
  // Speculative cascade (issue 48).
  draftHung,
  // Hardening round two (issue 48).
  longPrompt,
  requestKillsWorker,
  truncatedStream,
];
