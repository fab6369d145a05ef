/**
 * Preloaded into `kvgate serve` by `npm run bench -- stream-memory` (`node --expose-gc --import`):
 * SIGUSR2 runs a full garbage collection, so that the memory the gateway reports afterwards is
 * what its requests still hold, not garbage a collection has not reached yet.
 */
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('gc-on-signal: node was started without --expose-gc');
process.on('SIGUSR2', () => gc());
