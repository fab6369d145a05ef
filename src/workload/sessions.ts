/**
 * Closed-loop sessions: a session's next turn is sent a think time after the previous turn's
 * answer actually finished in the simulation (see BenchRequest.next), not at a time fixed in
 * advance.
 *
 * - sessionStart builds the first turn of a planned session: every turn's content (new user
 *   tokens, answer length, output seed, think time) is drawn when the session is planned, so the
 *   requests are the same whatever the fleet does; turn k+1's prompt is turn k's prompt, turn k's
 *   whole answer (the exact tokens the engine generates: answerTokens) and the new message.
 * - takeRequests keeps the first N requests of a source, counting each session's turns when its
 *   first turn is taken (a session cut short by N keeps its first turns).
 * - scaleArrivals plays the users faster: it divides the arrival times of the source's own
 *   requests (first turns and open-loop requests) and every think time by the scale, as
 *   `--rate-scale` does to an open-loop trace. The fleet's answer times are not scaled, so a
 *   session still waits for its answers. (Scaling only the session starts would not do: once
 *   every session of a finite workload overlaps, the closed loop caps the load whatever the
 *   scale, and a capacity search would never find the fleet's limit.)
 * - expandSessions lists every request of a source, later turns included, as if each request
 *   finished a fixed service time after it arrived: for inspection, tests and the ideal hit rate.
 *
 * A turn that is rejected or shed does not end its session: the next turn is sent a think time
 * after the refusal, with the content it would have had. Every policy therefore replays the same
 * requests, which capacity comparisons and ideal_hit_rate rely on (a refused turn still counts as
 * missing its SLO).
 */
import { LeadingPart } from '../kv/leading-part.js';
import { concatTokens, withAnswer } from './tokens.js';
import type { BenchRequest } from './types.js';

/** One planned turn of a session. */
export interface TurnSpec {
  /** Tokens the user adds in this turn (after the session's prefix for the first turn). */
  user: () => ArrayLike<number>;
  maxTokens: number;
  outputSeed: number;
  /** Time between the previous turn finishing and this one being sent, ms (ignored for the first). */
  thinkMs: number;
}

export interface SessionSpec {
  /** Session id (the request's `session`, the gateway's session key). */
  id: string;
  /** Arrival time of the first turn, ms. */
  startMs: number;
  /**
   * Tokens before the first user message (system prompt, tool specifications); as a LeadingPart
   * when other sessions share them, so their block hashes are computed once.
   */
  prefix: ArrayLike<number> | LeadingPart;
  turns: readonly TurnSpec[];
  tenant?: string;
}

/** The first turn of a planned session; each turn produces the next through `next`. */
export function sessionStart(s: SessionSpec): BenchRequest {
  if (s.turns.length === 0) throw new Error(`session ${s.id} has no turns`);
  // Each turn's prompt begins with the last one: `part` (the last prompt, or the session's prefix).
  const turn = (k: number, at: number, prompt: Int32Array, part: LeadingPart | null): BenchRequest => {
    const t = s.turns[k]!;
    const r: BenchRequest = {
      arrivalMs: at,
      promptTokens: prompt,
      ...(part !== null ? { promptPart: part } : {}),
      maxTokens: t.maxTokens,
      outputSeed: t.outputSeed,
      session: s.id,
      turns: s.turns.length - k,
    };
    if (s.tenant !== undefined) r.tenant = s.tenant;
    if (k + 1 < s.turns.length) {
      const nt = s.turns[k + 1]!;
      r.next = (doneMs) => turn(k + 1, doneMs + nt.thinkMs, withAnswer(prompt, t.outputSeed, t.maxTokens, nt.user()), new LeadingPart(prompt, part));
    }
    return r;
  };
  const prefix = s.prefix instanceof LeadingPart ? s.prefix : null;
  return turn(0, s.startMs, concatTokens([prefix !== null ? prefix.tokens : (s.prefix as ArrayLike<number>), s.turns[0]!.user()]), prefix);
}

/** The same request with at most `turns` requests left in its session (itself included). */
export function truncateSession(r: BenchRequest, turns: number): BenchRequest {
  if (turns >= (r.turns ?? 1)) return r;
  const out: BenchRequest = { ...r, turns: Math.max(1, turns) };
  const next = r.next;
  if (turns <= 1 || next === undefined) {
    delete out.next;
  } else {
    out.next = (doneMs) => {
      const n = next(doneMs);
      return n === undefined ? undefined : truncateSession(n, turns - 1);
    };
  }
  return out;
}

/**
 * The first `n` requests of a source, counting a session's turns when its first turn is taken;
 * the session that crosses `n` is cut short. Stops pulling from the source once `n` are taken.
 */
export function* takeRequests(src: Iterable<BenchRequest>, n: number): Generator<BenchRequest> {
  let budget = n;
  if (budget <= 0) return;
  const it = src[Symbol.iterator]();
  try {
    while (budget > 0) {
      const x = it.next();
      if (x.done) return;
      const r = x.value;
      const k = Math.max(1, r.turns ?? 1);
      if (k <= budget) {
        budget -= k;
        yield r;
      } else {
        yield truncateSession(r, budget);
        budget = 0;
      }
    }
  } finally {
    it.return?.();
  }
}

/**
 * At least `n` requests (a session's turns counted when its first turn is taken, as takeRequests
 * does), and then every request that arrives before `untilMs`: the first of them are takeRequests'
 * own, so a longer run only adds requests at its end. Sessions are never cut short.
 */
export function* takeLasting(src: Iterable<BenchRequest>, n: number, untilMs: number): Generator<BenchRequest> {
  let taken = 0;
  for (const r of src) {
    if (taken >= n && r.arrivalMs >= untilMs) return;
    taken += Math.max(1, r.turns ?? 1);
    yield r;
  }
}

/** A later turn's think time divided by `scale`, and so on down the session. */
function scaleThink(r: BenchRequest, scale: number): BenchRequest {
  const next = r.next;
  if (next === undefined) return r;
  return {
    ...r,
    next: (doneMs) => {
      const n = next(doneMs);
      if (n === undefined) return undefined;
      return scaleThink({ ...n, arrivalMs: doneMs + (n.arrivalMs - doneMs) / scale }, scale);
    },
  };
}

/** Multiply the rate of the source's own arrivals and of every session's turns (think times) by `scale`. */
export function* scaleArrivals(src: Iterable<BenchRequest>, scale: number): Generator<BenchRequest> {
  for (const r of src) yield scale === 1 ? r : scaleThink({ ...r, arrivalMs: r.arrivalMs / scale }, scale);
}

/**
 * Every request of a source in arrival order, later turns included, each request taken to finish
 * `serviceMs` after it arrives (0: at once). Ties: the source's own requests first, then later
 * turns in the order they were produced (as in the fleet simulation).
 */
export function* expandSessions(src: Iterable<BenchRequest>, serviceMs: number | ((r: BenchRequest) => number) = 0): Generator<BenchRequest> {
  const service = typeof serviceMs === 'number' ? () => serviceMs : serviceMs;
  // Pending later turns, sorted by (arrival, production order); small (one per open session).
  const pending: Array<{ t: number; seq: number; r: BenchRequest }> = [];
  let seq = 0;
  const add = (r: BenchRequest) => {
    if (!r.next) return;
    const n = r.next(r.arrivalMs + service(r));
    if (!n) return;
    const e = { t: Math.max(n.arrivalMs, r.arrivalMs), seq: seq++, r: n };
    let lo = 0;
    let hi = pending.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const p = pending[mid]!;
      if (p.t < e.t || (p.t === e.t && p.seq < e.seq)) lo = mid + 1;
      else hi = mid;
    }
    pending.splice(lo, 0, e);
  };
  for (const r of src) {
    while (pending.length > 0 && pending[0]!.t < r.arrivalMs) {
      const p = pending.shift()!;
      yield p.r;
      add(p.r);
    }
    yield r;
    add(r);
  }
  while (pending.length > 0) {
    const p = pending.shift()!;
    yield p.r;
    add(p.r);
  }
}
