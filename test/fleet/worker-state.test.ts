import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WorkerState, type InflightRequest } from '../../src/fleet/worker-state.js';

const worker = () => new WorkerState({ id: 'w0', url: 'http://127.0.0.1:1', pool: 'p', model: 'm', numGpuBlocks: 1000, blockSize: 16 });
const req = (id: string, at: number): InflightRequest => ({ id, promptTokens: 100, uncachedTokens: 100, maxTokens: 10, blocks: 8, dispatchedAt: at });

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
