/**
 * End to end on loopback: `kvgate sim --kv-events-drop` loses a share of its event batches on the
 * PUB socket, the gateway's subscriber finds the gaps from the sequence numbers and fills them
 * from the replay socket, and routing sees every stored prefix.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { runSim } from '../../src/cli/sim.js';
import { dropsBatch } from '../../src/sim/worker/kv-event-publisher.js';
import { MODEL, post, startGateway, waitFor } from '../gateway/helpers.js';

const DROP = 0.3;

async function startSim(extra: string[]): Promise<{ url: string; events: string; replay: string; stop: () => Promise<number> }> {
  const out = new PassThrough();
  let text = '';
  out.on('data', (c: Buffer) => (text += c.toString('utf8')));
  const ac = new AbortController();
  const done = runSim(['--port', '0', '--model', MODEL, '--speed', '100', '--kv-events-port', '0', '--kv-replay-port', '0', ...extra], { signal: ac.signal, out, err: new PassThrough() });
  await waitFor(() => /kv events: \S+\s+replay: \S+/.test(text) && /http:\/\/127\.0\.0\.1:\d+/.test(text), 5000);
  const [, events, replay] = /kv events: (\S+)\s+replay: (\S+)/.exec(text)!;
  const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(text)![1]!;
  return {
    url,
    events: events!,
    replay: replay!,
    stop: () => {
      ac.abort();
      return done;
    },
  };
}

for (const encoding of ['map', 'array']) {
  test(`a lossy worker (${encoding} encoding): gaps found by sequence number and filled by replay, every prefix routed on`, async () => {
    // The drop pattern is a fixed function of the sequence number: the last of the warm-up
    // batches is always followed by a batch that arrives, which reveals any gap before it.
    let run = 0;
    for (let s = 0; s < 200; s++) {
      run = dropsBatch(s, DROP) ? run + 1 : 0;
      assert.ok(run < 5, 'no five batches in a row are dropped');
    }
    const sim = await startSim(['--kv-events-drop', String(DROP), '--kv-events-encoding', encoding]);
    const { gw, url } = await startGateway([], {
      pools: [{ name: 'main', model: MODEL, workers: [{ url: sim.url, id: 'w0', kvEvents: { endpoint: sim.events, replayEndpoint: sim.replay } }] }],
      // dynamo learns nothing from its own routing: a hit can only come from the events.
      policy: { name: 'dynamo' },
    });
    try {
      const index = gw.router.policy.prefixIndex!;
      await waitFor(() => index.workerStatus('w0') !== undefined, 5000);
      const systemOf = (i: number) => `Topic ${i}: answer as a patient tutor would, step by step, with examples. `.repeat(20);
      const ask = (i: number, q: string) =>
        post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: systemOf(i) }, { role: 'user', content: q }], max_tokens: 2 });
      const warm = 8;
      for (let i = 0; i < warm; i++) assert.equal((await ask(i, 'first')).status, 200);
      // Later traffic, so a dropped warm-up batch is followed by one that arrives.
      for (let i = warm; i < warm + 6; i++) await ask(i, 'first');
      const describe = async () => ((await (await fetch(url + '/admin/workers')).json()) as any[]).find((w) => w.id === 'w0');
      await waitFor(async () => {
        const d = await describe();
        return d.kvEvents?.source === 'events' && d.kvEvents.lastSeq >= warm;
      }, 5000);
      const d = await describe();
      assert.ok(d.kvEvents.gaps > 0, `batches were dropped and noticed (gaps ${d.kvEvents.gaps})`);
      assert.ok(d.kvEvents.replays >= d.kvEvents.gaps);
      assert.equal(d.kvEvents.resyncs, 0, 'every gap was filled from the replay buffer');
      for (let i = 0; i < warm; i++) {
        const r = await ask(i, 'second');
        assert.ok(Number(r.headers.get('x-kvgate-prefix-hit')) > 0.5, `prefix ${i} is known despite the drops`);
      }
    } finally {
      await gw.close();
      assert.equal(await sim.stop(), 0);
    }
  });
}
