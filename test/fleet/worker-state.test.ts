import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WorkerState, type InflightRequest } from '../../src/fleet/worker-state.js';

const worker = () => new WorkerState({ id: 'w0', url: 'http://127.0.0.1:1', pool: 'p', model: 'm', numGpuBlocks: 1000, blockSize: 16 });
const req = (id: string, at: number): InflightRequest => ({ id, promptTokens: 100, uncachedTokens: 100, maxTokens: 10, blocks: 8, dispatchedAt: at });
/** A request with `uncached` prompt tokens and `out` output tokens reserved, blocks of 16. */
const charge = (id: string, uncached: number, out: number, at: number): InflightRequest => ({
  id,
  promptTokens: uncached,
  uncachedTokens: uncached,
  maxTokens: out,
  blocks: Math.ceil((uncached + out) / 16),
  dispatchedAt: at,
});

describe('WorkerState.currentQueue', () => {
  it('moves the last snapshot forward by the gateway’s own dispatches, first tokens and completions', () => {
    const w = worker();
    w.begin(req('old', 0)); // running at the scrape
    w.firstToken('old', 5);
    w.applySnapshot({ at: 10, kvUsage: 0.1, running: 3, waiting: 2 });
    assert.deepEqual(w.currentQueue(11, 5000), { running: 3, waiting: 2 });
    w.begin(req('a', 12));
    w.begin(req('b', 12));
    assert.deepEqual(w.currentQueue(13, 5000), { running: 3, waiting: 4 }, 'dispatches wait');
    w.firstToken('a', 14);
    assert.deepEqual(w.currentQueue(15, 5000), { running: 4, waiting: 3 }, 'a first token moves one into the batch');
    w.end('old');
    w.end('a');
    assert.deepEqual(w.currentQueue(16, 5000), { running: 2, waiting: 3 }, 'completions leave');
    w.end('b'); // ended before its first token (cancelled, or a non-streamed answer)
    assert.deepEqual(w.currentQueue(17, 5000), { running: 2, waiting: 2 });
    // The snapshot-only view (least-load's) still counts what left.
    assert.deepEqual(w.estimatedQueue(17, 5000), { running: 3, waiting: 4 });
    w.applySnapshot({ at: 20, kvUsage: 0.1, running: 1, waiting: 0 });
    assert.deepEqual(w.currentQueue(21, 5000), { running: 1, waiting: 0 }, 'a new scrape starts over');
  });

  it('never goes below zero, and falls back to the in-flight count when the snapshot is stale', () => {
    const w = worker();
    w.begin(req('x', 0));
    w.firstToken('x', 1);
    w.applySnapshot({ at: 2, kvUsage: 0, running: 0, waiting: 0 }); // a scrape that missed it
    w.end('x');
    assert.deepEqual(w.currentQueue(3, 5000), { running: 0, waiting: 0 });
    w.begin(req('y', 4));
    assert.deepEqual(w.currentQueue(10_000, 5000), { running: 1, waiting: 0 });
  });

  it('counts each sequence of a request of n answers, as the engine reports them', () => {
    const w = worker();
    w.applySnapshot({ at: 0, kvUsage: 0, running: 2, waiting: 0 });
    w.begin({ ...req('n8', 1), sequences: 8 });
    w.begin(req('one', 1));
    assert.equal(w.inflightCount, 2);
    assert.equal(w.inflightSequences, 9);
    assert.deepEqual(w.currentQueue(2, 5000), { running: 2, waiting: 9 });
    w.firstToken('n8', 3);
    assert.deepEqual(w.currentQueue(4, 5000), { running: 10, waiting: 1 });
    w.end('n8');
    assert.deepEqual(w.currentQueue(5, 5000), { running: 2, waiting: 1 });
    assert.equal(w.inflightSequences, 1);
    w.begin({ ...req('n4', 6), sequences: 4 });
    assert.deepEqual(w.currentQueue(10_000, 5000), { running: 5, waiting: 0 }, 'stale: the gateway’s own sequences');
  });
});

describe('WorkerState.peakInflightBlocks', () => {
  it('is the sum of reservations for requests that end together, and counts what a request has written', () => {
    const w = worker();
    w.begin(charge('a', 1600, 160, 0)); // 110 blocks
    w.begin(charge('b', 160, 160, 0)); // 20 blocks
    assert.equal(w.peakInflightBlocks(0), 130, 'both at their ends at once');
    w.firstToken('a', 10);
    assert.equal(w.peakInflightBlocks(810), 130, 'no decode speed known yet: nothing written');
    w.learnDecode(10); // 10 ms per token
    // At t = 1010 a has written 100 of its 160 tokens and b, still without a first token, none.
    // a ends in 60 steps, holding 1760 tokens, beside b's 160 + 60: 1980 tokens, 124 blocks.
    assert.equal(w.peakInflightBlocks(1010), 124);
    w.firstToken('b', 1010);
    // At t = 1810 a has written all 160 (it ends now: 1760 tokens) and b 80 of its 160 (240
    // tokens now, 320 at its end): the peak is now, 2000 tokens = 125 blocks.
    assert.equal(w.peakInflightBlocks(1810), 125);
    w.end('a');
    assert.equal(w.peakInflightBlocks(1810), 20, 'recomputed when the in-flight set changes');
    w.end('b');
    assert.equal(w.peakInflightBlocks(1810), 0);
  });

  it('lets requests ending at different steps hold less than the sum of their reservations', () => {
    const w = worker();
    w.begin(charge('long', 1600, 1600, 0)); // 200 blocks, ends after 1600 steps
    w.begin(charge('short', 160, 160, 0)); // 20 blocks, ends after 160
    // The short one is gone long before the long one is at its end: 3200 tokens = 200 blocks.
    assert.equal(w.peakInflightBlocks(0), 200);
    assert.equal(w.inflightBlocks, 220);
  });

  it('learns the decode speed as a moving average and ignores nonsense', () => {
    const w = worker();
    w.learnDecode(Number.NaN);
    w.learnDecode(0);
    w.learnDecode(-3);
    assert.equal(w.decodeMsPerToken, 0);
    w.learnDecode(20);
    assert.equal(w.decodeMsPerToken, 20);
    w.learnDecode(10);
    assert.ok(w.decodeMsPerToken < 20 && w.decodeMsPerToken > 10);
  });
});

describe('WorkerState.freeBlocksNow', () => {
  it('takes the scrape, less what was reserved since, plus what the scrape saw held by requests that ended since', () => {
    const w = worker(); // 1000 blocks of 16 tokens
    w.learnDecode(10);
    w.begin(charge('decoding', 1600, 320, 0)); // 120 blocks
    w.firstToken('decoding', 100);
    w.begin(charge('waiting', 800, 160, 0)); // 60 blocks, no first token at the scrape
    // At t = 1100 'decoding' has 100 prompt blocks and 100 tokens of output (6 full blocks).
    w.applySnapshot({ at: 1100, kvUsage: 0.5, running: 1, waiting: 1 });
    assert.equal(w.freeBlocksNow(1100, 5000), 500);
    w.begin(charge('new', 320, 160, 1200)); // 30 blocks reserved since the scrape
    assert.equal(w.freeBlocksNow(1200, 5000), 470);
    w.end('decoding');
    assert.equal(w.freeBlocksNow(1300, 5000), 470 + 106, 'it held 106 blocks at the scrape');
    assert.equal(w.estimatedFreeBlocks(1300, 5000), 470, 'the routing policies’ figure does not count them back');
    w.end('waiting');
    assert.equal(w.freeBlocksNow(1300, 5000), 576, 'it held none: waiting at the engine');
    w.end('new');
    assert.equal(w.freeBlocksNow(1300, 5000), 606, 'its reservation is returned');
    w.applySnapshot({ at: 1400, kvUsage: 0.1, running: 0, waiting: 0 });
    assert.equal(w.freeBlocksNow(1400, 5000), 900, 'a new scrape starts over');
    assert.equal(w.freeBlocksNow(9000, 5000), 1000, 'stale: the in-flight reservations alone');
  });
});
