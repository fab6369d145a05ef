import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { expandSessions, scaleArrivals, sessionStart, takeLasting, takeRequests, truncateSession, type TurnSpec } from '../../src/workload/sessions.js';
import { answerTokens } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';
import { workloadSource } from '../../src/workload/workloads.js';

const turn = (user: number[], maxTokens: number, outputSeed: number, thinkMs: number): TurnSpec => ({ user: () => user, maxTokens, outputSeed, thinkMs });

/** A three-turn session starting at `start`. */
const threeTurns = (id: string, start: number) =>
  sessionStart({
    id,
    startMs: start,
    prefix: [1, 2, 3],
    turns: [turn([10, 11], 4, 101, 0), turn([20], 2, 102, 500), turn([30, 31, 32], 3, 103, 250)],
  });

describe('closed-loop sessions', () => {
  it('builds each turn from the previous prompt, its whole answer and the new message, sent a think time after it finished', () => {
    const t0 = threeTurns('s', 100);
    assert.deepEqual(Array.from(t0.promptTokens), [1, 2, 3, 10, 11]);
    assert.equal(t0.arrivalMs, 100);
    assert.equal(t0.turns, 3);
    assert.equal(t0.session, 's');
    const t1 = t0.next!(1000)!;
    assert.equal(t1.arrivalMs, 1500);
    assert.equal(t1.turns, 2);
    assert.deepEqual(Array.from(t1.promptTokens), [1, 2, 3, 10, 11, ...answerTokens(101, 4), 20]);
    const t2 = t1.next!(2000)!;
    assert.equal(t2.arrivalMs, 2250);
    assert.deepEqual(Array.from(t2.promptTokens), [...Array.from(t1.promptTokens), ...answerTokens(102, 2), 30, 31, 32]);
    assert.equal(t2.turns, 1);
    assert.equal(t2.next, undefined);
    // The content does not depend on when the previous turn finished.
    assert.deepEqual(Array.from(t0.next!(5)!.promptTokens), Array.from(t1.promptTokens));
  });

  it('takeRequests counts a session’s turns when its first turn is taken and cuts the last session short', () => {
    const src = [threeTurns('a', 0), threeTurns('b', 10), threeTurns('c', 20)];
    const took = [...takeRequests(src, 5)];
    assert.deepEqual(took.map((r) => [r.session, r.turns]), [['a', 3], ['b', 2]]);
    const all = [...expandSessions(took)];
    assert.equal(all.length, 5);
    assert.deepEqual(all.filter((r) => r.session === 'b').map((r) => r.turns), [2, 1]);
    assert.equal([...takeRequests(src, 0)].length, 0);
    assert.equal(truncateSession(src[0]!, 1).next, undefined);
    // Pulls nothing beyond what it needs from an endless source.
    let pulled = 0;
    const endless = (function* () {
      for (let i = 0; ; i++) {
        pulled++;
        yield threeTurns(`s${i}`, i);
      }
    })();
    assert.equal([...takeRequests(endless, 6)].length, 2);
    assert.equal(pulled, 2);
  });

  it('takeLasting takes at least n turns, then whole sessions that arrive before the time given', () => {
    const src = [threeTurns('a', 0), threeTurns('b', 10), threeTurns('c', 20), threeTurns('d', 30)];
    // n reached after b; c arrives before 25 ms, d not.
    assert.deepEqual([...takeLasting(src, 4, 25)].map((r) => [r.session, r.turns]), [['a', 3], ['b', 3], ['c', 3]]);
    // The time reached first: n still counts.
    assert.deepEqual([...takeLasting(src, 7, 5)].map((r) => r.session), ['a', 'b', 'c']);
    // Arriving exactly at the time is past it.
    assert.deepEqual([...takeLasting(src, 1, 20)].map((r) => r.session), ['a', 'b']);
    assert.equal([...takeLasting(src, 0, 0)].length, 0);
  });

  it('workload sizes count every turn: expanding a sized closed-loop workload gives exactly that many requests', () => {
    for (const name of ['multi-turn', 'agentic']) {
      for (const size of [1, 37, 400]) {
        const rs = [...expandSessions(workloadSource(name, { size, seed: 2 }).open())];
        assert.equal(rs.length, size, `${name} size ${size}`);
      }
    }
  });

  it('scaleArrivals divides first arrivals and think times, not answer times', () => {
    const [s] = [...scaleArrivals([threeTurns('s', 100)], 4)];
    assert.equal(s!.arrivalMs, 25);
    const t1 = s!.next!(1000)!;
    assert.equal(t1.arrivalMs, 1000 + 500 / 4);
    const t2 = t1.next!(3000)!;
    assert.equal(t2.arrivalMs, 3000 + 250 / 4);
    const [same] = [...scaleArrivals([threeTurns('s', 100)], 1)];
    assert.equal(same!.next!(1000)!.arrivalMs, 1500);
  });

  it('expandSessions interleaves later turns with the source in time order', () => {
    const plain = (t: number): BenchRequest => ({ arrivalMs: t, promptTokens: [7], maxTokens: 1, outputSeed: t });
    const rs = [...expandSessions([threeTurns('s', 0), plain(400), plain(600), plain(900)], 100)];
    // s: 0, then 100 + 500 = 600 (after the plain request of 600: the source first), then 700 + 250 = 950.
    assert.deepEqual(rs.map((r) => [r.session ?? '-', r.arrivalMs]), [['s', 0], ['-', 400], ['-', 600], ['s', 600], ['-', 900], ['s', 950]]);
  });
});
