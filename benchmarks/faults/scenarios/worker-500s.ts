/** A worker that answers every generation with a 500: retried elsewhere, its breaker opens, clients see OK answers. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { closedLoop, spawnSims, startGateway, streamChat, type FaultScenario } from '../harness.js';

export const worker500s: FaultScenario = {
  name: 'worker-500s',
  description: 'one of three workers answers 500 to every generation (its /health stays fine)',
  async run() {
    const sims = await spawnSims(2);
    const bad = createServer((req, res) => {
      req.resume();
      if (req.url === '/health') return void res.end();
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"object":"error","message":"CUDA error: an illegal memory access at 10.0.0.7","type":"InternalServerError","code":500}');
    });
    await new Promise<void>((r) => bad.listen(0, '127.0.0.1', r));
    const badUrl = `http://127.0.0.1:${(bad.address() as AddressInfo).port}`;
    const { gw, url } = await startGateway([sims[0]!.url, badUrl, sims[1]!.url]);
    try {
      const { tally, outcomes } = await closedLoop({ base: url, clients: 20, durationMs: 4_000, next: streamChat });
      const leaked = outcomes.some((o) => /10\.0\.0\.7|CUDA/.test(o.text));
      return {
        tally,
        figures: { 'breaker of the failing worker': gw.registry.breaker('w1').state, 'worker text leaked to a client': leaked },
        checks: { 'every request answered OK': tally.ok === tally.sent, 'its breaker opened': gw.registry.breaker('w1').state !== 'closed', 'no upstream text reached a client': !leaked },
      };
    } finally {
      await gw.close();
      bad.closeAllConnections();
      bad.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
