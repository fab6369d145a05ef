/** Reads the repository's markdown: its relative links and the anchors its headings produce on GitHub. */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (tests run from dist/test/docs/). */
export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Markdown files a reader of the repository meets: the top-level guides, docs/, deploy/, examples/, src's READMEs. */
export function markdownFiles(root = ROOT): string[] {
  const out: string[] = [];
  for (const name of ['README.md', 'CONTRIBUTING.md', 'CHANGELOG.md']) if (existsSync(join(root, name))) out.push(join(root, name));
  const walk = (dir: string, keep: (file: string) => boolean): void => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      if (name === 'node_modules' || name.startsWith('.')) continue;
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p, keep);
      else if (keep(p)) out.push(p);
    }
  };
  const md = (p: string): boolean => p.endsWith('.md');
  walk(join(root, 'docs'), md);
  walk(join(root, 'deploy'), md);
  walk(join(root, 'examples'), md);
  walk(join(root, 'src'), (p) => p.endsWith('/README.md'));
  return out.sort();
}

/** The text with fenced code blocks blanked (their lines kept, so line numbers still hold) and inline code removed. */
export function proseOnly(text: string): string[] {
  const lines = text.split('\n');
  let fence: string | null = null;
  return lines.map((line) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence !== null) {
      if (m && m[1]![0] === fence[0] && m[1]!.length >= fence.length) fence = null;
      return '';
    }
    if (m) {
      fence = m[1]!;
      return '';
    }
    return line.replace(/(`+)[^`]*?\1/g, '');
  });
}

/** GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  const text = heading
    .replace(/`/g, '')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links keep their text
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\p{M} _-]/gu, '').replace(/ /g, '-');
}

/** Every anchor a markdown file offers: its headings' slugs (repeats get -1, -2, …) and explicit `<a id>`/`<a name>`. */
export function anchors(text: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  const raw = text.split('\n');
  let fence: string | null = null;
  for (const line of raw) {
    const f = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence !== null) {
      if (f && f[1]![0] === fence[0] && f[1]!.length >= fence.length) fence = null;
      continue;
    }
    if (f) {
      fence = f[1]!;
      continue;
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(m[1]!);
    const h = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!h) continue;
    const base = slug(h[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

export interface Link {
  line: number;
  target: string;
}

/** The relative links and bare `#anchor` links of a markdown text (inline, images, reference definitions). */
export function relativeLinks(text: string): Link[] {
  const out: Link[] = [];
  proseOnly(text).forEach((line, i) => {
    const found: string[] = [];
    for (const m of line.matchAll(/\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)/g)) found.push(m[1]!.replace(/^<|>$/g, ''));
    const def = /^\s{0,3}\[[^\]]+\]:\s*(\S+)/.exec(line);
    if (def) found.push(def[1]!);
    for (const target of found) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      out.push({ line: i + 1, target });
    }
  });
  return out;
}

/** Why a link from `file` does not resolve, or null when it does. */
export function brokenReason(file: string, target: string, root = ROOT): string | null {
  const hash = target.indexOf('#');
  const pathPart = decodeURIComponent(hash >= 0 ? target.slice(0, hash) : target);
  const anchor = hash >= 0 ? decodeURIComponent(target.slice(hash + 1)) : null;
  const dest = pathPart === '' ? file : pathPart.startsWith('/') ? join(root, pathPart) : join(file, '..', pathPart);
  if (!existsSync(dest)) return `${relative(root, dest)} does not exist`;
  if (anchor === null || anchor === '') return null;
  if (!dest.endsWith('.md')) return null; // a line anchor in a source file (#L10) is GitHub's to resolve
  if (!anchors(readFileSync(dest, 'utf8')).has(anchor)) return `no heading in ${relative(root, dest)} gives #${anchor}`;
  return null;
}
