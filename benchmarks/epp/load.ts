/**
 * The proxy's side of `npm run bench -- epp`, in a process of its own: ext_proc streams to the
 * EPP as Envoy's filter opens them (wire.ts: each message encoded once per body, gRPC framed by
 * hand, so that the generator's own CPU stays well under the EPP's), one per request: the request
 * headers, the body in 16 KiB chunks (FULL_DUPLEX_STREAMED), then the answer read; then a
 * worker's answer passed through (response headers, one JSON body with usage) and the stream
 * closed. No worker is called: the EPP's cost is what is measured, and the proxy's hop is nginx's
 * (measured beside it by benchmarks/epp.ts).
 *
 * The decision latency of a request: from the moment its last body chunk is handed to the
 * stream to the arrival of the request-headers response (the pick).
 * Writes one JSON LoadResult line on stdout.
 * Argument: a file holding the JSON LoadSpec.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { completion } from '../overhead/responses.js';
import { framedRequest, readAnswer, WireClient, type FramedRequest } from './wire.js';

export interface LoadSpec {
  address: string;
  /** Request bodies, used in turn. */
  bodies: string[];
  seconds: number;
  /** Open loop at this rate (req/s) … */
  rate?: number;
  /** … or this many streams in a closed loop. */
  concurrency?: number;
  /** gRPC connections the streams are spread over (Envoy keeps a few per worker thread). */
  connections: number;
}

export interface LoadResult {
  requests: number;
  errors: number;
  firstError: string | null;
  /** Decision latencies, µs, one per request. */
  latencyUs: number[];
  /** This process's CPU time over the measurement, µs. */
  cpuUs: number;
  wallMs: number;
}

const CHUNK = 16_384;
const RESPONSE = Buffer.from(completion);

/** One request through the stream; resolves with its decision latency in µs. */
async function exchange(client: WireClient, r: FramedRequest): Promise<number> {
  const s = client.open();
  s.write(r.headers);
  for (const chunk of r.body) s.write(chunk);
  const t0 = performance.now();
  let m = await s.next();
  const latency = (performance.now() - t0) * 1000;
  const first = m === null ? null : readAnswer(m);
  if (first === null || first.kind !== 'pick') {
    s.end();
    throw new Error(first === null ? `stream ended before the pick (grpc-status ${s.grpcStatus || 'none'})` : first.kind === 'immediate' ? `ImmediateResponse ${first.status}` : 'the first answer is not the pick');
  }
  // The body echoed back, up to its end.
  for (;;) {
    m = await s.next();
    if (m === null) throw new Error('stream ended in the body echo');
    const a = readAnswer(m);
    if (a.kind === 'chunk' && a.end) break;
  }
  s.write(r.responseHeaders);
  await s.next();
  s.write(r.responseBody);
  await s.next();
  s.end();
  // The EPP ends the stream once the proxy has: a stream it leaves open is a failed request.
  const closed = await Promise.race([s.closed.then(() => true), new Promise<boolean>((res) => setTimeout(() => res(false), 10_000).unref())]);
  if (!closed) {
    s.cancel();
    throw new Error('the EPP did not end the stream within 10 s of the proxy');
  }
  if (s.grpcStatus !== '0') throw new Error(`the stream ended with grpc-status ${s.grpcStatus || 'none'}`);
  return latency;
}

async function run(spec: LoadSpec): Promise<LoadResult> {
  const clients = Array.from({ length: spec.connections }, () => new WireClient(spec.address));
  const bodies = spec.bodies.map((b) => framedRequest('/v1/chat/completions', Buffer.from(b), CHUNK, RESPONSE));
  const latencyUs: number[] = [];
  let errors = 0;
  let firstError: string | null = null;
  let n = 0;
  const one = async (): Promise<void> => {
    const i = n++;
    try {
      latencyUs.push(await exchange(clients[i % clients.length]!, bodies[i % bodies.length]!));
    } catch (e) {
      errors++;
      firstError ??= (e as Error).message;
    }
  };
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + spec.seconds * 1000;
  if (spec.rate !== undefined) {
    // Open loop: arrivals on a fixed schedule, whatever the answers do.
    const gap = 1000 / spec.rate;
    const pending: Promise<void>[] = [];
    for (let k = 0; start + k * gap < end; k++) {
      const wait = start + k * gap - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      pending.push(one());
    }
    await Promise.all(pending);
  } else {
    const loops = Array.from({ length: spec.concurrency ?? 1 }, async () => {
      while (performance.now() < end) await one();
    });
    await Promise.all(loops);
  }
  const wallMs = performance.now() - start;
  const c = process.cpuUsage(cpu0);
  for (const cl of clients) cl.close();
  return { requests: latencyUs.length, errors, firstError, latencyUs, cpuUs: c.user + c.system, wallMs };
}

const spec = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as LoadSpec;
run(spec).then(
  (r) => process.stdout.write(JSON.stringify(r) + '\n'),
  (e: Error) => {
    process.stderr.write(`epp load: ${e.message}\n`);
    process.exitCode = 1;
  },
);
