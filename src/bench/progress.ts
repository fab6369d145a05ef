/**
 * A one-line progress bar on stderr for long bench runs, redrawn at most every 100 ms.
 */

export interface ProgressBar {
  update(done: number, virtualMs: number): void;
  finish(): void;
}

export function createProgressBar(label: string, total: number | undefined, stream: NodeJS.WriteStream = process.stderr): ProgressBar {
  const width = 30;
  let lastDraw = 0;
  const started = performance.now();
  const draw = (done: number, virtualMs: number) => {
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    const sim = (virtualMs / 1000).toFixed(0);
    let line: string;
    if (total && total > 0) {
      const frac = Math.min(1, done / total);
      const filled = Math.round(frac * width);
      line = `${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} requests, ${sim} s simulated, ${secs} s`;
    } else {
      line = `${label} ${done} requests, ${sim} s simulated, ${secs} s`;
    }
    stream.write(`\r${line}\x1b[K`);
  };
  return {
    update(done, virtualMs) {
      const now = performance.now();
      if (now - lastDraw < 100) return;
      lastDraw = now;
      draw(done, virtualMs);
    },
    finish() {
      stream.write('\r\x1b[K');
    },
  };
}
