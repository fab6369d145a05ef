/**
 * Cost of the engine model itself: steps/s and generated tokens/s of a busy engine, with token
 * reporting on (the live worker) and off (the fleet simulation), and off with the decode steps
 * taken as runs (Engine.decodeRun and decodeStep, as the fleet simulation takes them), in the same
 * process: the ratio of the last to the first is what runs save per step.
 * Usage: npm run bench -- engine-step [running=256] [steps=20000]
 */

import { Engine } from '../src/engine/engine.js';
import { buildEngineConfig } from '../src/engine/profiles.js';
import { hashSampler } from '../src/engine/synthetic-lm.js';

const USAGE =
  'npm run bench -- engine-step [RUNNING] [STEPS]\n\n' +
  "The engine model's own cost: steps/s and generated tokens/s of one busy engine (Llama-3.1-8B on an\n" +
  'H100 profile) with RUNNING sequences in its batch (default 256) for STEPS steps (default 20000),\n' +
  'with token reporting on (the live worker) and off (the fleet simulation), and off with pure decode\n' +
  'steps taken as runs (as the simulation takes them).\n';
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const running = Number(process.argv[2] ?? 256);
const steps = Number(process.argv[3] ?? 20000);
if (!Number.isInteger(running) || running < 1 || !Number.isInteger(steps) || steps < 1) {
  process.stderr.write(`engine-step: RUNNING and STEPS must be positive integers (got ${process.argv.slice(2).join(' ')})\n\n${USAGE}`);
  process.exit(2);
}

function run(emitTokens: boolean, kvEvents: boolean, runs = false, print = true): void {
  const config = buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', emitTokens, kvEvents, maxNumSeqs: running, hashSeed: 1 });
  const engine = new Engine(config);
  // Prompts share a 512-token system prefix and differ after it, like a chat workload.
  const shared = Array.from({ length: 512 }, (_, i) => (i * 7) % 4000);
  let next = 0;
  const addOne = () => {
    const id = `r${next++}`;
    const prompt = shared.concat(Array.from({ length: 256 }, (_, i) => (next * 131 + i * 17) % 4000));
    engine.add({ id, prompt, maxTokens: 200 + (next % 300), sampler: hashSampler(id), ignoreEos: true });
  };
  for (let i = 0; i < running; i++) addOne();
  let tokens = 0;
  let simMs = 0;
  const durations = new Float64Array(512);
  let runSteps = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < steps; i++) {
    const k = runs ? engine.decodeRun(durations.subarray(0, Math.min(512, steps - i))) : 0;
    if (k > 0) {
      // k steps of the batch as it is; the last may finish requests.
      for (let j = 0; j < k; j++) {
        const finished = engine.decodeStep();
        tokens += engine.running() + finished.length;
        simMs += durations[j]!;
        for (let f = 0; f < finished.length; f++) addOne();
      }
      i += k - 1;
      runSteps += k;
      continue;
    }
    const r = engine.step()!;
    tokens += r.decodeTokens + r.firstTokens.length;
    simMs += r.durationMs;
    // Keep the engine full: every finished request is replaced by a new one.
    for (let k = 0; k < r.finished.length; k++) addOne();
  }
  const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
  const st = engine.stats();
  if (print) console.log(
    `emitTokens=${emitTokens} kvEvents=${kvEvents}${runs ? ` decode runs (${((runSteps / steps) * 100).toFixed(0)}% of steps)` : ''}: ${running} running, ${steps} steps in ${wallS.toFixed(2)} s → ` +
      `${Math.round(steps / wallS).toLocaleString('en-US')} steps/s, ${Math.round(tokens / wallS).toLocaleString('en-US')} tokens/s ` +
      `(simulated ${(simMs / 1000).toFixed(1)} s of GPU time, ${st.finished.length + st.finished.stop} finished, hit rate ${((st.prefixHits / st.prefixQueries) * 100).toFixed(0)}%)`,
  );
}

// A first pass of each, unprinted, so that none is timed while the code is still being compiled.
for (const print of [false, true]) {
  run(false, false, false, print);
  run(true, false, false, print);
  run(true, true, false, print);
  run(false, false, true, print);
}
