/**
 * The module graph's rules: no import cycles (type-only imports included, so a cycle cannot hide
 * behind `import type`), no cycles between top-level folders, and no edge from the live request
 * path to the simulator or the bench. Imports are read from the TypeScript sources with the
 * compiler's own pre-processor, so every form (`import`, `export … from`, `import()`) counts.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const SRC = join(ROOT, 'src');

/** Top-level folders (or root files, without `.ts`) that each folder may not import. */
const FORBIDDEN: Record<string, readonly string[]> = {
  // The live gateway path never loads the engine model, the simulator or the bench.
  api: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'scheduler', 'fleet'],
  gateway: ['engine', 'sim', 'bench', 'workload', 'cli'],
  scheduler: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'api'],
  fleet: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'scheduler'],
  telemetry: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'scheduler'],
  tokenizer: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'scheduler', 'fleet'],
  config: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway'],
  // The shared vocabulary depends on nothing but utilities.
  kv: ['api', 'bench', 'cli', 'config', 'engine', 'fleet', 'gateway', 'scheduler', 'sim', 'telemetry', 'tokenizer', 'workload'],
  util: ['api', 'bench', 'cli', 'config', 'engine', 'fleet', 'gateway', 'kv', 'scheduler', 'sim', 'telemetry', 'tokenizer', 'workload'],
  // The GPUs' figures are plain data the engine model and the routing policy both read.
  hardware: ['admission', 'api', 'bench', 'cache', 'cli', 'config', 'engine', 'fleet', 'gateway', 'http', 'kv', 'scheduler', 'shared', 'sim', 'speculative', 'telemetry', 'tokenizer', 'util', 'workload'],
  // The engine model is plain code: no gateway, routing or drivers.
  engine: ['api', 'bench', 'cli', 'fleet', 'gateway', 'scheduler', 'sim', 'workload'],
  // The simulator drives engines and the router; the bench drives the simulator, never the reverse.
  sim: ['bench', 'cli'],
  // Tenants and the response cache are plain code the gateway and the simulation both use.
  admission: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'scheduler', 'fleet', 'cache', 'config'],
  // State shared by replicas through Redis: plain pieces the gateway wires in.
  shared: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'api', 'cache'],
  cache: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'scheduler', 'fleet', 'config', 'telemetry'],
  // The cascade runs on the live path: no engine, simulator or bench.
  // The gateway installs the speculative stages; they meet it only through src/request/.
  speculative: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway'],
  // The request context and the stage contract: what the gateway and its stages share.
  request: ['engine', 'sim', 'bench', 'workload', 'cli', 'gateway', 'speculative', 'cache', 'shared'],
  // The relay's HTTP client is transport only: it knows nothing of workers, routing or requests.
  http: ['admission', 'api', 'bench', 'cache', 'cli', 'config', 'engine', 'fleet', 'gateway', 'kv', 'scheduler', 'shared', 'sim', 'speculative', 'telemetry', 'tokenizer', 'workload'],
  // Request sources are data: they know nothing of who replays them.
  workload: ['bench', 'cli', 'engine', 'fleet', 'gateway', 'scheduler', 'sim'],
};

type Graph = Map<string, string[]>;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (e.name.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** File → the files it imports (relative specifiers only: packages are not part of the graph). */
function importGraph(files: readonly string[]): Graph {
  const g: Graph = new Map();
  for (const f of files) {
    const info = ts.preProcessFile(readFileSync(f, 'utf8'), true, true);
    const deps: string[] = [];
    for (const ref of info.importedFiles) {
      if (!ref.fileName.startsWith('.')) continue;
      deps.push(resolve(dirname(f), ref.fileName).replace(/\.js$/, '.ts'));
    }
    g.set(f, deps);
  }
  return g;
}

/** Strongly connected components with more than one member, or a self-import (Tarjan). */
export function cycles(g: Graph): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of g.get(v) ?? []) {
      if (!g.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || (g.get(v) ?? []).includes(v)) out.push(scc.sort());
  };
  for (const v of g.keys()) if (!index.has(v)) visit(v);
  return out;
}

/** `src/scheduler/index/prefix-index.ts` → `scheduler`; `src/cli.ts` → `cli`. */
function folderOf(file: string): string {
  return relative(SRC, file).split(/[\\/]/)[0]!.replace(/\.ts$/, '');
}

function folderGraph(g: Graph): Graph {
  const out: Graph = new Map();
  for (const [f, deps] of g) {
    const a = folderOf(f);
    const set = out.get(a) ?? [];
    for (const d of deps) {
      const b = folderOf(d);
      if (b !== a && !set.includes(b)) set.push(b);
    }
    out.set(a, set);
  }
  return out;
}

const rel = (f: string) => relative(ROOT, f);

describe('module graph', () => {
  const files = sourceFiles(SRC);
  const graph = importGraph(files);

  it('reads every source file and resolves every relative import to a file that exists', () => {
    assert.ok(files.length > 50, `only ${files.length} files under src/`);
    const known = new Set(files);
    const dangling = [...graph].flatMap(([f, deps]) => deps.filter((d) => !known.has(d)).map((d) => `${rel(f)} → ${rel(d)}`));
    assert.deepEqual(dangling, []);
  });

  it('has no import cycle between files, type-only imports included', () => {
    assert.deepEqual(cycles(graph).map((c) => c.map(rel)), []);
  });

  it('has no cycle between top-level folders', () => {
    assert.deepEqual(cycles(folderGraph(graph)), []);
  });

  it('keeps the live path off the simulator and every folder off the folders it must not import', () => {
    const bad: string[] = [];
    for (const [f, deps] of graph) {
      const banned = FORBIDDEN[folderOf(f)] ?? [];
      for (const d of deps) if (banned.includes(folderOf(d))) bad.push(`${rel(f)} → ${rel(d)}`);
    }
    assert.deepEqual(bad, []);
  });

  it('finds a cycle when there is one (the checker itself can fail)', () => {
    const g: Graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['a']],
      ['e', ['e']],
    ]);
    assert.deepEqual(cycles(g), [['a', 'b', 'c'], ['e']]);
    assert.deepEqual(cycles(new Map([['a', ['b']], ['b', []]])), []);
  });
});

/**
 * File → what it imports at load time: relative files (as .ts) and packages, leaving out
 * `import type` (erased) and `import()` (loaded when the code runs).
 */
export function loadTimeImports(file: string, text: string): string[] {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const out: string[] = [];
  for (const st of src.statements) {
    let spec: ts.Expression | undefined;
    if (ts.isImportDeclaration(st) && st.importClause?.isTypeOnly !== true) spec = st.moduleSpecifier;
    else if (ts.isExportDeclaration(st) && !st.isTypeOnly) spec = st.moduleSpecifier;
    if (spec === undefined || !ts.isStringLiteral(spec)) continue;
    const name = spec.text;
    out.push(name.startsWith('.') ? resolve(dirname(file), name).replace(/\.js$/, '.ts') : name);
  }
  return out;
}

/** The chain of load-time imports from `entry` to `target` (a package), or null when it is not loaded. */
function loadChain(entry: string, target: string): string[] | null {
  const from = new Map<string, string>([[entry, '']]);
  const queue = [entry];
  while (queue.length > 0) {
    const f = queue.shift()!;
    for (const d of loadTimeImports(f, readFileSync(f, 'utf8'))) {
      if (from.has(d)) continue;
      from.set(d, f);
      if (d === target || d.startsWith(`${target}/`)) {
        const chain = [d];
        for (let x = f; x !== ''; x = from.get(x)!) chain.unshift(rel(x));
        return chain;
      }
      if (d.endsWith('.ts')) queue.push(d);
    }
  }
  return null;
}

describe('load-time imports', () => {
  it('loads the Kubernetes client only when discovery starts, not with the gateway, the EPP or the CLI', () => {
    for (const entry of ['cli.ts', 'gateway/gateway.ts', 'epp/epp.ts']) {
      assert.equal(loadChain(join(SRC, entry), '@kubernetes/client-node')?.join(' → ') ?? null, null, entry);
    }
    // The check can fail: the discovery module itself loads the client.
    assert.ok(loadChain(join(SRC, 'fleet/kubernetes/discovery.ts'), '@kubernetes/client-node'));
  });

  it('leaves type-only and dynamic imports out', () => {
    const f = join(SRC, 'x.ts');
    const text = "import type { A } from './a.js';\nimport { b } from './b.js';\nexport { c } from 'c';\nexport type { D } from './d.js';\nconst e = await import('./e.js');\n";
    assert.deepEqual(loadTimeImports(f, text), [join(SRC, 'b.ts'), 'c']);
  });
});

/** The longest a function in src/ may be, in lines from its first to its last (nested functions included). */
const MAX_FUNCTION_LINES = 200;

/** Every function with a body in `text` (declarations, methods, arrows, constructors) and its length in lines. */
export function functionLengths(file: string, text: string): { name: string; line: number; lines: number }[] {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: { name: string; line: number; lines: number }[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isFunctionLike(n) && 'body' in n && n.body !== undefined) {
      const first = src.getLineAndCharacterOfPosition(n.getStart()).line;
      const last = src.getLineAndCharacterOfPosition(n.end).line;
      const p = n.parent;
      const name =
        n.name !== undefined ? n.name.getText() : ts.isConstructorDeclaration(n) ? 'constructor' : p && (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p)) ? p.name.getText() : '<anonymous>';
      out.push({ name, line: first + 1, lines: last - first + 1 });
    }
    ts.forEachChild(n, visit);
  };
  visit(src);
  return out;
}

describe('function length', () => {
  it(`has no function in src/ longer than ${MAX_FUNCTION_LINES} lines`, () => {
    const long = sourceFiles(SRC).flatMap((f) =>
      functionLengths(f, readFileSync(f, 'utf8'))
        .filter((fn) => fn.lines > MAX_FUNCTION_LINES)
        .map((fn) => `${rel(f)}:${fn.line} ${fn.name} (${fn.lines} lines)`),
    );
    assert.deepEqual(long, []);
  });

  it('measures functions of every form, nested ones included (the checker itself can fail)', () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  x${i}();`).join('\n');
    const text = [
      `function decl() {\n${body(3)}\n}`,
      `const arrow = () => {\n${body(201)}\n};`,
      `class C {\n  constructor() {\n${body(1)}\n  }\n  method() {\n    return () => 1;\n  }\n}`,
      `const o = { prop: function () {\n${body(2)}\n} };`,
    ].join('\n');
    const got = functionLengths('t.ts', text).map((f) => `${f.name}:${f.lines}`);
    assert.deepEqual(got, ['decl:5', 'arrow:203', 'constructor:3', 'method:3', '<anonymous>:1', 'prop:4']);
  });
});
