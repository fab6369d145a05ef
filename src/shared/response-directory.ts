/**
 * Which worker holds each stored Responses API response, shared by gateway replicas: a
 * continuation (`previous_response_id`) that reaches another replica than the one that relayed the
 * response still goes to the worker that has it (gateway/response-affinity.ts asks here for the ids
 * it has not seen itself). One key per response, `<prefix>resp:<id>` → worker id, kept `ttlS`.
 *
 * Redis away or slow: the lookup answers "not known" (the request is routed as any other, and a
 * worker without the response answers 404) and the write is dropped; both are counted.
 */
import type { RedisLink } from './redis-link.js';

export interface ResponseDirectory {
  remember(responseId: string, workerId: string): void;
  workerFor(responseId: string): Promise<string | undefined>;
}

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

  remember(responseId: string, workerId: string): void {
    if (!this.o.link.up) {
      this.counts.failed++;
      return;
    }
    this.o.link.client.set(this.key(responseId), workerId, 'EX', this.o.ttlS).then(
      () => void this.counts.stored++,
      () => void this.counts.failed++,
    );
  }

  async workerFor(responseId: string): Promise<string | undefined> {
    if (!this.o.link.up) {
      this.counts.failed++;
      return undefined;
    }
    try {
      const w = await this.o.link.client.get(this.key(responseId));
      if (w === null) this.counts.notFound++;
      else this.counts.found++;
      return w ?? undefined;
    } catch {
      this.counts.failed++;
      return undefined;
    }
  }
}
