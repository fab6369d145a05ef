/**
 * The config file's sections, one field each, in the order errors are reported. Each section's
 * schema and documentation live in the file named beside it; the cross-field checks are in
 * checks.ts.
 */
import { z } from 'zod';
import { admissionSection } from './admission.js';
import { cacheSection } from './cache.js';
import { capsSection } from './caps.js';
import { disaggregationSection } from './disaggregation.js';
import { discoverySection } from './discovery.js';
import { eppSection } from './epp.js';
import { circuitBreakerSection, healthSection, outlierSection, scrapeSection } from './fleet.js';
import { logSection, reloadSection, shutdownSection } from './operations.js';
import { policySection } from './policy.js';
import { aliasesSection, poolsSection, workersSection } from './pools-workers.js';
import { limitsSection, listenSection, serverSection } from './server.js';
import { sharedSection } from './shared.js';
import { speculativeSection } from './speculative.js';
import { adminSection, cacheSaltSection, tenantsSection } from './tenants-admin.js';
import { tokenizersSection } from './tokenizers.js';
import { retrySection, timeoutsSection, upstreamSection } from './upstream.js';

export const configSections = z.strictObject({
  listen: listenSection, // server.ts
  pools: poolsSection, // pools-workers.ts
  workers: workersSection, // pools-workers.ts
  timeouts: timeoutsSection, // upstream.ts
  scrape: scrapeSection, // fleet.ts
  health: healthSection, // fleet.ts
  circuitBreaker: circuitBreakerSection, // fleet.ts
  policy: policySection, // policy.ts
  limits: limitsSection, // server.ts
  caps: capsSection, // caps.ts
  server: serverSection, // server.ts
  outlier: outlierSection, // fleet.ts
  cacheSalt: cacheSaltSection, // tenants-admin.ts
  retry: retrySection, // upstream.ts
  upstream: upstreamSection, // upstream.ts
  reload: reloadSection, // operations.ts
  shutdown: shutdownSection, // operations.ts
  tokenizers: tokenizersSection, // tokenizers.ts
  log: logSection, // operations.ts
  aliases: aliasesSection, // pools-workers.ts
  tenants: tenantsSection, // tenants-admin.ts
  admin: adminSection, // tenants-admin.ts
  cache: cacheSection, // cache.ts
  admission: admissionSection, // admission.ts
  speculative: speculativeSection, // speculative.ts
  shared: sharedSection, // shared.ts
  disaggregation: disaggregationSection, // disaggregation.ts
  discovery: discoverySection, // discovery.ts
  epp: eppSection, // epp.ts
});

/** A config as validated section by section, before the cross-field checks. */
export type ConfigSections = z.output<typeof configSections>;
