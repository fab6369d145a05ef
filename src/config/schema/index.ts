/** The config schema: every section (sections.ts) and the checks across them (checks.ts). */
import type { z } from 'zod';
import { checkConfig } from './checks.js';
import { configSections } from './sections.js';

export const configSchema = configSections.superRefine(checkConfig);

/** A config as written (defaults not yet filled in). */
export type RawConfig = z.input<typeof configSchema>;
/** A config as validated, defaults filled in (config/parse.ts resolves keys, workers and fallbacks from it). */
export type ParsedConfig = z.output<typeof configSchema>;
