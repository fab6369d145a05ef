/** Reading a config file: YAML or JSON text, parsed, then validated by parseConfig. */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { ConfigError, parseConfig, type GatewayConfig } from './parse.js';

/**
 * Read and validate a YAML or JSON config file. Throws ConfigError (also for unreadable files).
 * `adjust` may change the parsed document before it is validated (command-line overrides).
 */
export function loadConfigFile(path: string, adjust?: (raw: unknown) => unknown): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError([`cannot read ${path}: ${(e as Error).message}`]);
  }
  return parseConfigText(text, path, adjust);
}

/** Validate the text of a YAML or JSON config file (`path` only names it in errors). Throws ConfigError. */
export function parseConfigText(text: string, path: string, adjust?: (raw: unknown) => unknown): GatewayConfig {
  let data: unknown;
  try {
    data = parseYaml(text);
  } catch (e) {
    throw new ConfigError([`${path} is not valid YAML/JSON: ${(e as Error).message.split('\n')[0]}`]);
  }
  return parseConfig(adjust ? adjust(data) : data);
}
