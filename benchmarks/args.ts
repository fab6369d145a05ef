/**
 * The benchmarks' flags: node:util's parseArgs, with a flag it does not know (or a value it cannot
 * take) answered by one line naming the benchmark and where its options are, exit status 2,
 * instead of parseArgs's stack trace.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

export function benchArgs<const T extends ParseArgsConfig>(name: string, config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (e) {
    process.stderr.write(`bench ${name}: ${(e as Error).message} (options: npm run bench -- ${name} --help)\n`);
    process.exit(2);
  }
}
