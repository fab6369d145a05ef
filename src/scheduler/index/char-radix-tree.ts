/**
 * A radix tree over characters shared by several tenants (workers), with per-tenant access stamps
 * and per-tenant LRU leaf eviction — the structure SGLang's cache-aware router keeps per model to
 * guess what each worker's cache holds from the text of the prompts it sent there
 * (sgl-project/sglang `sgl-model-gateway/src/policies/tree.rs`, now lightseekorg/smg
 * `crates/kv_index/src/string_tree.rs`).
 *
 * Each node holds a run of characters, the tenants that hold it with the stamp of their last
 * access, and an owner: the tenant that created the node (a split node inherits the owner of the
 * node it was cut from). A match resolves to the owner of the deepest node it reached while the
 * owner still holds it, else to the first remaining tenant, which then becomes the owner — so
 * among workers that all hold a prefix, the one that sent it first keeps winning it. Stamps come
 * from one counter ticking once per insert and per match; a match stamps the resolved tenant on
 * one match in eight, as SGLang does to spare contention.
 */

interface TreeNode {
  text: string;
  readonly children: Map<number, TreeNode>;
  parent: TreeNode | null;
  /** Tenant → stamp of its last access (0: passed through by an insert, never touched). */
  readonly tenants: Map<string, number>;
  owner: string | null;
}

export interface TreeMatch {
  /** Characters of the text matched along the tree (by any tenant). */
  matched: number;
  /** The tenant the match resolves to, or null if the tree knows none. */
  tenant: string | null;
}

function sharedPrefix(text: string, from: number, edge: string): number {
  let j = 0;
  while (j < edge.length && from + j < text.length && edge.charCodeAt(j) === text.charCodeAt(from + j)) j++;
  return j;
}

export class CharRadixTree {
  private readonly root: TreeNode = { text: '', children: new Map(), parent: null, tenants: new Map(), owner: null };
  /** Characters each tenant holds. */
  private readonly chars = new Map<string, number>();
  private epoch = 0;

  /** Characters `tenant` holds. */
  sizeOf(tenant: string): number {
    return this.chars.get(tenant) ?? 0;
  }

  /**
   * The longest prefix of `text` in the tree and the tenant it resolves to. Not read-only: it
   * fills the owner of the deepest node when that was unknown or gone, and stamps the resolved
   * tenant there one match in eight.
   */
  match(text: string): TreeMatch {
    let node = this.root;
    let at = this.root;
    let i = 0;
    while (i < text.length) {
      const child = node.children.get(text.charCodeAt(i));
      if (!child) break;
      const j = sharedPrefix(text, i, child.text);
      i += j;
      at = child;
      if (j < child.text.length) break;
      node = child;
    }
    let tenant = at.owner !== null && at.tenants.has(at.owner) ? at.owner : null;
    if (tenant === null) {
      tenant = at.tenants.keys().next().value ?? null;
      at.owner = tenant;
    }
    const e = this.epoch++;
    if ((e & 7) === 0 && tenant !== null) at.tenants.set(tenant, e);
    return { matched: i, tenant };
  }

  /** Characters of the longest prefix of `text` that `tenant` holds. Read-only. */
  matchFor(text: string, tenant: string): number {
    let node = this.root;
    let i = 0;
    while (i < text.length) {
      const child = node.children.get(text.charCodeAt(i));
      if (!child || !child.tenants.has(tenant)) break;
      const j = sharedPrefix(text, i, child.text);
      i += j;
      if (j < child.text.length) break;
      node = child;
    }
    return i;
  }

  /** Record that `tenant` holds `text`: its last node gets a fresh stamp, the path stamp 0. */
  insert(text: string, tenant: string): void {
    if (!this.root.tenants.has(tenant)) this.root.tenants.set(tenant, 0);
    if (!this.chars.has(tenant)) this.chars.set(tenant, 0);
    let node = this.root;
    let i = 0;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      const child = node.children.get(c);
      if (!child) {
        const leaf: TreeNode = {
          text: text.slice(i),
          children: new Map(),
          parent: node,
          tenants: new Map([[tenant, this.epoch++]]),
          owner: tenant,
        };
        node.children.set(c, leaf);
        this.addChars(tenant, leaf.text.length);
        return;
      }
      const j = sharedPrefix(text, i, child.text);
      if (j < child.text.length) {
        // Split: the shared part becomes a node of its own, held by the child's tenants.
        const mid: TreeNode = {
          text: child.text.slice(0, j),
          children: new Map(),
          parent: node,
          tenants: new Map(child.tenants),
          owner: child.owner,
        };
        child.text = child.text.slice(j);
        child.parent = mid;
        mid.children.set(child.text.charCodeAt(0), child);
        node.children.set(c, mid);
        node = mid;
      } else node = child;
      if (!node.tenants.has(tenant)) {
        node.tenants.set(tenant, 0);
        this.addChars(tenant, node.text.length);
      }
      i += j;
    }
    node.tenants.set(tenant, this.epoch++);
  }

  /**
   * For every tenant holding more than `maxChars` characters, drop its least recently stamped
   * leaves (nodes none of whose children it holds) until it holds at most that; nodes no tenant
   * holds any more leave the tree.
   */
  evict(maxChars: number): void {
    const heap = new StampHeap();
    const stack: TreeNode[] = [this.root];
    while (stack.length > 0) {
      const n = stack.pop()!;
      for (const c of n.children.values()) stack.push(c);
      for (const [t, stamp] of n.tenants) if (this.isLeafFor(n, t)) heap.push(stamp, t, n);
    }
    for (let e = heap.pop(); e; e = heap.pop()) {
      const { tenant, node } = e;
      if ((this.chars.get(tenant) ?? 0) <= maxChars) continue;
      if (!node.tenants.has(tenant) || !this.isLeafFor(node, tenant)) continue;
      this.addChars(tenant, -node.text.length);
      node.tenants.delete(tenant);
      const parent = node.parent;
      if (parent && node.children.size === 0 && node.tenants.size === 0) parent.children.delete(node.text.charCodeAt(0));
      if (parent && parent.tenants.has(tenant) && this.isLeafFor(parent, tenant)) {
        heap.push(parent.tenants.get(tenant)!, tenant, parent);
      }
    }
  }

  private isLeafFor(n: TreeNode, tenant: string): boolean {
    for (const c of n.children.values()) if (c.tenants.has(tenant)) return false;
    return true;
  }

  private addChars(tenant: string, n: number): void {
    this.chars.set(tenant, Math.max(0, (this.chars.get(tenant) ?? 0) + n));
  }
}

/** Min-heap of (stamp, tenant, node), earliest stamp first. */
class StampHeap {
  private readonly items: Array<{ stamp: number; tenant: string; node: TreeNode }> = [];

  push(stamp: number, tenant: string, node: TreeNode): void {
    const a = this.items;
    a.push({ stamp, tenant, node });
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p]!.stamp <= a[i]!.stamp) break;
      [a[p], a[i]] = [a[i]!, a[p]!];
      i = p;
    }
  }

  pop(): { stamp: number; tenant: string; node: TreeNode } | undefined {
    const a = this.items;
    if (a.length === 0) return undefined;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && a[l]!.stamp < a[m]!.stamp) m = l;
        if (r < a.length && a[r]!.stamp < a[m]!.stamp) m = r;
        if (m === i) break;
        [a[m], a[i]] = [a[i]!, a[m]!];
        i = m;
      }
    }
    return top;
  }
}
