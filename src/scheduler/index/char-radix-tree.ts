/**
 * A radix tree over characters with per-node access times and LRU leaf eviction — the structure
 * SGLang's cache-aware router keeps for each worker to guess what its cache holds from the text
 * of the prompts it sent there.
 */

interface RadixNode {
  edge: string;
  children: Map<number, RadixNode>;
  parent: RadixNode | null;
  lastAccess: number;
}

export class CharRadixTree {
  private readonly root: RadixNode = { edge: '', children: new Map(), parent: null, lastAccess: 0 };
  /** Characters stored on all edges. */
  size = 0;

  /** Length of the longest prefix of `text` in the tree. */
  match(text: string): number {
    let node = this.root;
    let i = 0;
    for (;;) {
      if (i >= text.length) return i;
      const child = node.children.get(text.charCodeAt(i));
      if (!child) return i;
      const edge = child.edge;
      let j = 0;
      while (j < edge.length && i < text.length && edge.charCodeAt(j) === text.charCodeAt(i)) {
        j++;
        i++;
      }
      if (j < edge.length) return i;
      node = child;
    }
  }

  /** Insert `text`, marking every node on its path as used at `now`. */
  insert(text: string, now: number): void {
    let node = this.root;
    node.lastAccess = now;
    let i = 0;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      const child = node.children.get(c);
      if (!child) {
        const leaf: RadixNode = { edge: text.slice(i), children: new Map(), parent: node, lastAccess: now };
        node.children.set(c, leaf);
        this.size += leaf.edge.length;
        return;
      }
      const edge = child.edge;
      let j = 0;
      while (j < edge.length && i + j < text.length && edge.charCodeAt(j) === text.charCodeAt(i + j)) j++;
      if (j < edge.length) {
        // Split the edge at j: a new inner node takes the shared part.
        const mid: RadixNode = { edge: edge.slice(0, j), children: new Map(), parent: node, lastAccess: now };
        child.edge = edge.slice(j);
        child.parent = mid;
        mid.children.set(child.edge.charCodeAt(0), child);
        node.children.set(c, mid);
        node = mid;
      } else {
        child.lastAccess = now;
        node = child;
      }
      i += j;
    }
  }

  /** Remove least recently used leaves until the tree holds at most `maxChars` characters. */
  evict(maxChars: number): void {
    if (this.size <= maxChars) return;
    const leaves: RadixNode[] = [];
    const stack: RadixNode[] = [this.root];
    while (stack.length > 0) {
      const n = stack.pop()!;
      if (n.children.size === 0 && n !== this.root) leaves.push(n);
      else for (const c of n.children.values()) stack.push(c);
    }
    leaves.sort((a, b) => a.lastAccess - b.lastAccess);
    // Parents emptied by eviction join the queue; keep it ordered by a simple merge-on-demand.
    let queue = leaves;
    while (this.size > maxChars && queue.length > 0) {
      const next: RadixNode[] = [];
      for (const leaf of queue) {
        if (this.size <= maxChars) break;
        const parent = leaf.parent!;
        parent.children.delete(leaf.edge.charCodeAt(0));
        this.size -= leaf.edge.length;
        if (parent !== this.root && parent.children.size === 0) next.push(parent);
      }
      next.sort((a, b) => a.lastAccess - b.lastAccess);
      queue = next;
    }
  }
}
