/**
 * "Did you mean": the known name closest to a mistyped one, for error messages.
 *
 * A name is close when it starts with the typed one or the other way round (`ttl` for `ttlMs`,
 * `intervalMsec` for `intervalMs`), or when few edits turn one into the other: at most one edit
 * per three characters of the typed name, and at least one (optimal string alignment distance:
 * insertions, deletions, substitutions, swaps of adjacent characters; letter case ignored).
 */

/** The known name nearest to `typed`, or undefined if none is close enough to suggest. */
export function nearestName(typed: string, known: readonly string[]): string | undefined {
  const t = typed.toLowerCase();
  let best: string | undefined;
  let bestScore = Infinity;
  for (const name of known) {
    if (name === typed) continue;
    const n = name.toLowerCase();
    const d = editDistance(t, n);
    const prefix = t.length >= 2 && (n.startsWith(t) || t.startsWith(n));
    if (!prefix && d > Math.max(1, Math.floor(t.length / 3))) continue;
    // Among close names, fewest edits first; a prefix match ranks just behind a one-edit typo.
    const score = prefix ? Math.min(d, 1.5) : d;
    if (score < bestScore) {
      best = name;
      bestScore = score;
    }
  }
  return best;
}

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[] = new Array<number>(rows * cols).fill(0);
  for (let i = 0; i < rows; i++) d[i * cols] = i;
  for (let j = 0; j < cols; j++) d[j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[(i - 1) * cols + j]! + 1, d[i * cols + j - 1]! + 1, d[(i - 1) * cols + j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[(i - 2) * cols + j - 2]! + 1);
      d[i * cols + j] = v;
    }
  }
  return d[rows * cols - 1]!;
}
