/**
 * Which worker holds each stored Responses API response, shared by gateway replicas: a
 * continuation (`previous_response_id`) that reaches another replica than the one that relayed the
 * response still goes to the worker that has it (gateway/responses/response-affinity.ts asks here for the ids
 * it has not seen itself). One key per response, `<prefix>resp:<id>` → `<tenant id>␟<worker id>`
 * (U+001F between them: a tenant id never holds it), kept `ttlS`. A value with no tenant (written
 * by an older replica) is a holder whose tenant is not known.
 *
 * Redis away or slow: the lookup throws ResponseDirectoryUnreachable (the owner cannot be checked,
 * so the gateway does not guess: gateway/responses/response-affinity.ts) and the write is dropped; both are
 * counted.
 */
import type { RedisLink } from './redis-link.js';

/** Who holds a stored response: the worker that wrote it, for the tenant that asked for it. */
export interface ResponseHolder {
  workerId: string;
  /** null: not known (an entry written before tenants were recorded). */
  tenantId: string | null;
}

export interface ResponseDirectory {
  remember(responseId: string, holder: ResponseHolder): void;
  /** The holder, or undefined when the directory has no entry; throws ResponseDirectoryUnreachable. */
  holderOf(responseId: string): Promise<ResponseHolder | undefined>;
}

/** The directory could not be asked (Redis away, or slower than its command timeout). */
export class ResponseDirectoryUnreachable extends Error {
  constructor(cause: string) {
    super(`the shared response directory is unreachable: ${cause}`);
    this.name = 'ResponseDirectoryUnreachable';
  }
}

const SEPARATOR = '\u001f';

export interface RedisResponseDirectoryOptions {
  link: RedisLink;
  keyPrefix: string;
  /** How long an entry is kept, s. */
  ttlS: number;
}

export class RedisResponseDirectory implements ResponseDirectory {
  readonly counts = { stored: 0, found: 0, notFound: 0, failed: 0 };

  constructor(private readonly o: RedisResponseDirectoryOptions) {}

  private key(id: string): string {
    return `${this.o.keyPrefix}resp:${id}`;
  }

  remember(responseId: string, holder: ResponseHolder): void {
    if (!this.o.link.up) {
      this.counts.failed++;
      return;
    }
    const value = holder.tenantId === null ? holder.workerId : `${holder.tenantId}${SEPARATOR}${holder.workerId}`;
    this.o.link.client.set(this.key(responseId), value, 'EX', this.o.ttlS).then(
      () => void this.counts.stored++,
      () => void this.counts.failed++,
    );
  }

  async holderOf(responseId: string): Promise<ResponseHolder | undefined> {
    if (!this.o.link.up) {
      this.counts.failed++;
      throw new ResponseDirectoryUnreachable('redis is not connected');
    }
    let v: string | null;
    try {
      v = await this.o.link.client.get(this.key(responseId));
    } catch (e) {
      this.counts.failed++;
      throw new ResponseDirectoryUnreachable((e as Error).message);
    }
    if (v === null) {
      this.counts.notFound++;
      return undefined;
    }
    this.counts.found++;
    const at = v.indexOf(SEPARATOR);
    return at < 0 ? { workerId: v, tenantId: null } : { workerId: v.slice(at + 1), tenantId: v.slice(0, at) };
  }
}
