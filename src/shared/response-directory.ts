/**
 * Which worker holds each stored Responses API response, shared by gateway replicas: a
 * continuation (`previous_response_id`) that reaches another replica than the one that relayed the
 * response still goes to the worker that has it (gateway/response-affinity.ts asks here for the ids
 * it has not seen itself). One key per response, `<prefix>resp:<id>` → `<tenant id>␟<worker id>`
 * (U+001F between them: a tenant id never holds it), kept `ttlS`. A value with no tenant (written
 * by an older replica) is a holder whose tenant is not known.
 *
 * Redis away or slow: the lookup answers "not known" (the request is routed as any other, and a
 * worker without the response answers 404) and the write is dropped; both are counted.
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
  holderOf(responseId: string): Promise<ResponseHolder | undefined>;
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
      return undefined;
    }
    try {
      const v = await this.o.link.client.get(this.key(responseId));
      if (v === null) {
        this.counts.notFound++;
        return undefined;
      }
      this.counts.found++;
      const at = v.indexOf(SEPARATOR);
      return at < 0 ? { workerId: v, tenantId: null } : { workerId: v.slice(at + 1), tenantId: v.slice(0, at) };
    } catch {
      this.counts.failed++;
      return undefined;
    }
  }
}
