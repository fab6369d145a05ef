/** Secrets kvgate itself sends or uses (an upstream API key, the cache-salt secret), read at load. */
import { readFileSync } from 'node:fs';

export type SecretSource = { env?: string; file?: string; value?: string };

/** Read a secret kvgate uses itself (an upstream API key, the cache-salt secret). */
export function readSecret(src: SecretSource, env: NodeJS.ProcessEnv): { ok: true; value: string } | { ok: false; field: string; message: string } {
  if (src.value !== undefined) return { ok: true, value: src.value };
  if (src.env !== undefined) {
    const v = env[src.env]?.trim();
    return v ? { ok: true, value: v } : { ok: false, field: 'env', message: `environment variable ${src.env} is not set or empty` };
  }
  try {
    const v = readFileSync(src.file!, 'utf8').trim();
    return v ? { ok: true, value: v } : { ok: false, field: 'file', message: `${src.file} is empty` };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { ok: false, field: 'file', message: `cannot read ${src.file}${code ? ` (${code})` : ''}` };
  }
}
