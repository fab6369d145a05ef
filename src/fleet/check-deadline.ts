/**
 * The timeout of a check of a worker (health probe, scrape, model list), judged on the time the
 * gateway's event loop was free to read the worker's answer.
 *
 * A plain timer counts the gateway's own stalls against the worker: when the loop is blocked (a
 * long synchronous task, a busy machine), the timer runs late, in the timers phase of the loop's
 * next turn, which comes before the poll phase that reads the sockets, where the worker's answer
 * may have been waiting all along. So when the timer fires late (by more than a quarter of the
 * timeout, and at least STALL_MS) the worker is given the timeout again, from now, up to
 * MAX_EXTENSIONS times (a worker that is really hung is still declared so, after at most
 * (1 + MAX_EXTENSIONS) timeouts plus the stalls); and the final abort waits for one poll phase
 * (setImmediate runs after it), so an answer already in the socket is read first.
 */

/** Lateness of the timer, ms, below which the loop is taken to have run normally. */
const STALL_MS = 20;
const MAX_EXTENSIONS = 3;

export interface CheckDeadline {
  readonly signal: AbortSignal;
  /** Times the deadline was moved for a stall of the gateway's loop. */
  readonly extensions: number;
  /** Stop the timer (the check ended). */
  clear(): void;
}

export function checkDeadline(timeoutMs: number): CheckDeadline {
  const ac = new AbortController();
  let deadline = performance.now() + timeoutMs;
  let extensions = 0;
  let timer: NodeJS.Timeout | null = null;
  let immediate: NodeJS.Immediate | null = null;
  const fire = (): void => {
    timer = null;
    const now = performance.now();
    if (now - deadline > Math.max(STALL_MS, timeoutMs / 4) && extensions < MAX_EXTENSIONS) {
      extensions++;
      deadline = now + timeoutMs;
      arm(timeoutMs);
      return;
    }
    immediate = setImmediate(() => {
      immediate = null;
      ac.abort(new Error(`timed out after ${timeoutMs} ms`));
    });
  };
  const arm = (ms: number): void => {
    timer = setTimeout(fire, ms);
    timer.unref();
  };
  arm(timeoutMs);
  return {
    signal: ac.signal,
    get extensions() {
      return extensions;
    },
    clear() {
      if (timer) clearTimeout(timer);
      if (immediate) clearImmediate(immediate);
      timer = null;
      immediate = null;
    },
  };
}
