/**
 * A tenant's requests counted from the moment its key is read, before the body arrives.
 *
 * The rate limiter (admission/rate-limit.ts) counts a request once its body has been read and
 * parsed; a client that sends headers with a valid key and then stalls its body would otherwise
 * hold any number of connections, each one mid-request (so connections.ts cannot close it to
 * make room), until the global connection cap turns everyone away. Here, per gateway process:
 *
 * - a tenant with `limits.concurrentRequests` has at most that many requests in progress from
 *   their key read to their end: one more is refused at once, with the rate limiter's own 429
 *   (`rate_limit_exceeded`, type `requests`) and the connection closed (its body is never read);
 * - whatever its limits, a tenant has at most `pendingCap()` requests whose body is still
 *   arriving (a share of `server.maxConnections`, `server.tenantPendingBodyShare`): one more is
 *   refused with 429 the same way, so the connection budget left is other tenants'.
 *
 * The rate limiter's count (shared between replicas through Redis when configured) still applies
 * once the body is in; this count is the local bound a stalled body cannot get around.
 */
import type { Tenant } from '../../admission/tenants.js';
import { describeRefusal } from '../../admission/rate-limit.js';
import { ApiError } from '../../api/errors.js';

/** One request's place in its tenant's counts; each method may be called more than once. */
export interface TenantSlot {
  /** The body has arrived (or will not): the request no longer counts as a pending body. */
  bodyRead(): void;
  /** The request has ended. */
  end(): void;
}

export class TenantSlots {
  private readonly inProgress = new Map<string, number>();
  private readonly pendingBodies = new Map<string, number>();
  /** Requests refused here, by reason (for tests and the fault matrix). */
  refusedConcurrent = 0;
  refusedPending = 0;

  /** @param pendingCap the most requests of one tenant whose bodies may be arriving at once (read per request) */
  constructor(private readonly pendingCap: () => number) {}

  /** Count a request of `tenant` whose key was just read; throws the 429 to answer if it is over a bound. */
  enter(tenant: Tenant): TenantSlot {
    const id = tenant.id;
    const running = this.inProgress.get(id) ?? 0;
    const pending = this.pendingBodies.get(id) ?? 0;
    const max = tenant.limits.concurrentRequests;
    if (max !== undefined && running >= max) {
      this.refusedConcurrent++;
      const r = describeRefusal('concurrent', tenant.limits, 0, 0);
      throw refusal(r.kind, r.message, r.waitMs);
    }
    const cap = this.pendingCap();
    if (pending >= cap) {
      this.refusedPending++;
      throw refusal('requests', `Too many requests of this API key are still sending their bodies (at most ${cap} at once). Please finish sending them, or try again later.`, 1000);
    }
    this.inProgress.set(id, running + 1);
    this.pendingBodies.set(id, pending + 1);
    let waiting = true;
    let open = true;
    const bodyRead = (): void => {
      if (!waiting) return;
      waiting = false;
      decrement(this.pendingBodies, id);
    };
    return {
      bodyRead,
      end: () => {
        bodyRead();
        if (!open) return;
        open = false;
        decrement(this.inProgress, id);
      },
    };
  }

  /** Requests of `tenant` in progress since their key was read, and those whose body is still arriving. */
  counts(tenant: string): { inProgress: number; pendingBodies: number } {
    return { inProgress: this.inProgress.get(tenant) ?? 0, pendingBodies: this.pendingBodies.get(tenant) ?? 0 };
  }
}

function decrement(m: Map<string, number>, id: string): void {
  const n = (m.get(id) ?? 1) - 1;
  if (n <= 0) m.delete(id);
  else m.set(id, n);
}

/** The rate limiter's 429, and the connection closed: the body is not read. */
function refusal(kind: 'requests' | 'tokens', message: string, waitMs: number): ApiError {
  return new ApiError(429, kind, 'rate_limit_exceeded', message, null, { 'retry-after': String(Math.max(1, Math.ceil(waitMs / 1000))), connection: 'close' });
}
