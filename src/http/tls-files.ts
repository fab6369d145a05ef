/**
 * The TLS certificate and key the gateway serves with (`listen.tls`), read from files: at start,
 * where a file that cannot be read or a key that does not match its certificate stops the start
 * with one line naming the field; and again at every config reload (SIGHUP, or the config file
 * changing), so a renewed certificate (cert-manager, certbot) is served to new connections without
 * a restart. A reload that cannot read them keeps the ones in use.
 */
import { readFileSync } from 'node:fs';
import { createSecureContext, type SecureContextOptions } from 'node:tls';

export interface TlsFiles {
  certFile: string;
  keyFile: string;
  /** CA bundle: clients must present a certificate it signed (mutual TLS). */
  clientCaFile?: string;
}

/** Read and check the files: the options for https.createServer / setSecureContext, or the problem. */
export function readTls(f: TlsFiles): { ok: true; options: SecureContextOptions & { requestCert?: boolean; rejectUnauthorized?: boolean } } | { ok: false; problem: string } {
  const read = (field: keyof TlsFiles, path: string): Buffer | string => {
    try {
      return readFileSync(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      return `listen.tls.${field}: cannot read ${path}${code ? ` (${code})` : ''}`;
    }
  };
  const cert = read('certFile', f.certFile);
  if (typeof cert === 'string') return { ok: false, problem: cert };
  const key = read('keyFile', f.keyFile);
  if (typeof key === 'string') return { ok: false, problem: key };
  const ca = f.clientCaFile === undefined ? undefined : read('clientCaFile', f.clientCaFile);
  if (typeof ca === 'string') return { ok: false, problem: ca };
  const options = { cert, key, ...(ca ? { ca, requestCert: true, rejectUnauthorized: true } : {}) };
  try {
    createSecureContext(options);
  } catch (e) {
    return { ok: false, problem: `listen.tls: ${(e as Error).message} (is keyFile the key of certFile, both PEM?)` };
  }
  return { ok: true, options };
}
