/**
 * Socket writes held to the end of the event loop's I/O phase and sent together, the way Redis
 * sends its replies from `beforeSleep` rather than as each command completes.
 *
 * Why: on a busy gateway one turn of the event loop handles many sockets' events. Written as each
 * request is handled, every response and every upstream request is a system call that wakes the
 * process at the other end (the client, the worker), which on a small virtual machine has gone
 * back to sleep in the meantime; those wake-ups cost more than the gateway's own work (the
 * measurements are in docs/performance.md). Held until the loop has handled every event it
 * polled (one `setImmediate`, which runs right after the poll phase), the turn's writes go out
 * back to back and the processes at the other end are woken once per turn, not once per write.
 * Writes are held only while the event loop is saturated (below): with time to spare, holding
 * would make each answer wait for its turn's other events and save nothing the process needs.
 *
 * Only for writes whose order within the turn does not matter: each held socket carries one
 * request at a time.
 */
import type { ServerResponse } from 'node:http';
import type { Writable } from 'node:stream';

const held: Writable[] = [];
const heldSet = new Set<Writable>();
const ending: ServerResponse[] = [];
let scheduled = false;
/** performance.now() when the batch's first write was held. */
let openedAt = 0;

/** The longest a write is held, even if the turn goes on (a long turn flushes part-way). */
export const HOLD_LIMIT_MS = 1;

/**
 * Writes are held only while the event loop is saturated ('auto'). With time to spare, a write
 * held to the end of the turn would wait for the turn's other events and save nothing the
 * process needs, so it goes out at once. The loop's utilisation is sampled every SAMPLE_MS;
 * holding starts at BUSY and stops below IDLE (holding itself lowers the utilisation: about a
 * third less CPU per request, hence the gap). 'always' and 'never' are for tests and benchmarks.
 */
export type HoldMode = 'auto' | 'always' | 'never';
const SAMPLE_MS = 200;
const BUSY = 0.8;
const IDLE = 0.5;
let mode: HoldMode = 'auto';
let busy = false;
let sampler: NodeJS.Timeout | null = null;
let lastElu = performance.eventLoopUtilization();

export function setHoldMode(m: HoldMode): void {
  mode = m;
  if (m !== 'always' && scheduled) flush();
}

/** True while writes are being held. */
export function holdingWrites(): boolean {
  return mode === 'always' || (mode === 'auto' && busy);
}

function startSampling(): void {
  lastElu = performance.eventLoopUtilization();
  sampler = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const u = performance.eventLoopUtilization(now, lastElu).utilization;
    lastElu = now;
    if (!busy && u >= BUSY) busy = true;
    else if (busy && u < IDLE) busy = false;
  }, SAMPLE_MS);
  sampler.unref();
}

/** Schedule the flush for a new batch, or flush an old one first; false: write now instead. */
function schedule(): boolean {
  if (sampler === null) startSampling();
  if (mode === 'never' || (mode === 'auto' && !busy)) return false;
  if (scheduled) {
    if (performance.now() - openedAt <= HOLD_LIMIT_MS) return true;
    // The turn is long: what was held so far has waited enough.
    flush();
  }
  scheduled = true;
  openedAt = performance.now();
  // A batch flushed early (above) leaves its setImmediate nothing to do, or a newer batch to send.
  setImmediate(flush);
  return true;
}

/**
 * Send everything held now (normally run by the scheduled `setImmediate`). Responses are ended
 * first: Node's `res.end()` uncorks the socket fully, so an ended response goes out in one write.
 */
export function flush(): void {
  scheduled = false;
  for (let i = 0; i < ending.length; i++) {
    const res = ending[i]!;
    if (!res.writableEnded && !res.destroyed) res.end();
  }
  ending.length = 0;
  for (let i = 0; i < held.length; i++) {
    const s = held[i]!;
    if (!s.destroyed && s.writableCorked > 0) s.uncork();
  }
  held.length = 0;
  heldSet.clear();
}

/**
 * Hold what is written to `s` until the flush: cork it once per turn (a second call in the same
 * turn does nothing). True if `s` is held (now or already): whoever corks through here never
 * uncorks, the flush does. False if writes are not being held: `s` is left as it was.
 */
export function holdWrites(s: Writable | null | undefined): boolean {
  if (!s || s.destroyed) return false;
  if (heldSet.has(s)) return true;
  if (!schedule()) return false;
  s.cork();
  held.push(s);
  heldSet.add(s);
  return true;
}

/**
 * `res.end()` at the flush, together with the turn's other writes. A response without a socket
 * (captured in memory) or already destroyed is ended now.
 */
export function endSoon(res: ServerResponse): void {
  if (!res.socket || res.destroyed || !schedule()) {
    res.end();
    return;
  }
  ending.push(res);
}
