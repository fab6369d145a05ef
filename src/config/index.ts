/**
 * Gateway configuration: a YAML or JSON file validated with zod. Every field has a default except
 * the workers; examples/kvgate.yaml documents each one. The schema is in schema/ (one file per
 * section or group of sections), validation in parse.ts, reading files in load.ts, the worker
 * list in workers.ts.
 */
export { aliasTarget } from './aliases.js';
export { loadConfigFile, parseConfigText } from './load.js';
export { ConfigError, parseConfig, type CacheConfig, type GatewayConfig } from './parse.js';
export { configSchema, type RawConfig } from './schema/index.js';
export { DEFAULT_POLICY_NAME } from './schema/policy.js';
export type { RequestCaps, RequestCapsOverride, WorkerKvEvents } from './types.js';
