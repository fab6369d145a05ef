/**
 * Prints the time model's calibration against published measurements as a markdown table.
 * Usage: npm run bench -- calibration
 */

import { calibrationTable } from '../src/engine/calibration.js';
import { buildEngineConfig, sizeEngine } from '../src/engine/profiles.js';

if (process.argv.length > 2) {
  const help = process.argv.includes('--help') || process.argv.includes('-h');
  (help ? process.stdout : process.stderr).write(
    'npm run bench -- calibration\n\n' +
      "The engine model's step times beside published vLLM measurements (target: within 20%), and the\n" +
      'KV blocks each built-in engine profile holds, as markdown tables. It takes no options.\n',
  );
  process.exit(help ? 0 : 2);
}

console.log(calibrationTable());
console.log();
console.log('| engine | KV blocks (16 tokens) | KV tokens |');
console.log('|---|---:|---:|');
for (const [gpu, model, tp] of [
  ['h100', 'llama-3.1-8b', 1],
  ['a100', 'llama-3.1-8b', 1],
  ['a10g', 'llama-3.1-8b', 1],
  ['h100', 'llama-3.1-70b', 2],
  ['h100', 'llama-3.1-70b', 4],
] as const) {
  const s = sizeEngine({ gpu, model, tp });
  buildEngineConfig({ gpu, model, tp });
  console.log(`| ${model} ${tp}×${gpu} | ${s.numGpuBlocks} | ${s.numGpuBlocks * 16} |`);
}
