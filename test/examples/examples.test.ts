import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { ConfigError, loadConfigFile, parseConfig, parseConfigText } from '../../src/config/index.js';

const EXAMPLES = fileURLToPath(new URL('../../../examples/', import.meta.url));
const files = readdirSync(EXAMPLES).filter((f) => /\.(ya?ml|json)$/.test(f)).sort();

test('examples/ holds the reference file and the small ones the docs name', () => {
  for (const f of ['kvgate.yaml', 'minimal.yaml', 'tenants.yaml', 'replicas.yaml', 'cascade.yaml', 'lora.yaml', 'mixed-gpus.yaml']) {
    assert.ok(files.includes(f), `examples/${f} is missing`);
  }
});

for (const file of files) {
  test(`examples/${file} loads with the gateway's own config parser`, () => {
    // Keys read from the environment are the deployment's to set: give each one a value here.
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const m of readFileSync(join(EXAMPLES, file), 'utf8').matchAll(/^[^#\n]*\benv: ([A-Z][A-Z0-9_]*)/gm)) env[m[1]!] ??= `example-value-of-${m[1]}`;
    let config;
    try {
      // parseConfigText's two steps, with the environment given.
      config = parseConfig(parseYaml(readFileSync(join(EXAMPLES, file), 'utf8')), env);
    } catch (e) {
      if (e instanceof ConfigError) assert.fail(`examples/${file}:\n${e.message}`);
      throw e;
    }
    assert.ok(config.workers.length > 0, `examples/${file} configures no worker`);
  });
}

test('a broken example would fail: the parser rejects a misspelt field and an unreadable file', () => {
  const typo = 'pools:\n  - name: p\n    model: m\n    workers: [{ url: http://127.0.0.1:8000 }]\ncache: { enabled: true, ttl: 1000 }\n';
  assert.throws(() => parseConfigText(typo, 'typo.yaml'), (e: unknown) => e instanceof ConfigError && /cache/.test(e.message));
  assert.throws(() => loadConfigFile(join(EXAMPLES, 'does-not-exist.yaml')), ConfigError);
});
