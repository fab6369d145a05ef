#!/usr/bin/env node
/**
 * `kvgate <command>`: each command lives in src/cli/<command>.ts and exports `help` and `run`.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface Command {
  summary: string;
  load: () => Promise<{ help: string; run(argv: string[]): Promise<number> }>;
}

const COMMANDS: Record<string, Command> = {
  demo: { summary: 'gateway plus an embedded simulated fleet on loopback', load: () => import('./cli/demo.js') },
  serve: { summary: 'run the gateway in front of the workers named in a config file', load: () => import('./cli/serve.js') },
  epp: { summary: "be the Endpoint Picker of an Envoy-family gateway (ext_proc gRPC): kvgate's routing, the proxy's data path", load: () => import('./cli/epp.js') },
  sim: { summary: 'run one simulated vLLM worker', load: () => import('./cli/sim.js') },
  doctor: { summary: 'check workers as kvgate needs them (metrics, KV events, token parity), with a fix per failure', load: () => import('./cli/doctor.js') },
  bench: { summary: 'replay a trace or workload against a simulated fleet, compare policies', load: () => import('./cli/bench.js') },
};

export const USAGE = `kvgate — an OpenAI-compatible gateway that routes on the state of vLLM workers' KV caches

Usage: kvgate <command> [options]

Commands:
${Object.entries(COMMANDS)
  .map(([n, c]) => `  ${n.padEnd(8)}${c.summary}`)
  .join('\n')}

Run 'kvgate <command> --help' for a command's options.
`;

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(USAGE);
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-v') {
    const { createRequire } = await import('node:module');
    const pkg = createRequire(import.meta.url)('../../package.json') as { version: string };
    process.stdout.write(`${pkg.version}\n`);
    return 0;
  }
  const cmd = COMMANDS[name];
  if (!cmd) {
    process.stderr.write(`kvgate: unknown command '${name}'\n\n${USAGE}`);
    return 2;
  }
  const mod = await cmd.load();
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(mod.help);
    return 0;
  }
  return mod.run(rest);
}

function invokedDirectly(): boolean {
  // The npm bin is a symlink: compare real paths.
  try {
    return import.meta.url === pathToFileURL(realpathSync(process.argv[1] ?? '')).href;
  } catch {
    return false;
  }
}

if (invokedDirectly()) {
  main(process.argv.slice(2)).then(
    (code) => {
      // Long-running commands resolve only when they have shut down; a numeric code ends the process.
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`kvgate: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
