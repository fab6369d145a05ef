/**
 * The dashboard page: one HTML document with its CSS and script inline, so the gateway serves it
 * with no build step and the browser loads nothing from anywhere else (the Content-Security-Policy
 * below forbids it). The script polls /dashboard/state once a second and fills the page with
 * `textContent` only (worker ids and labels are never parsed as HTML).
 *
 * The client code is plain ES2020 in a string; it uses no template literals so that it can live
 * inside this one.
 */

/** No external anything: inline style and script, fetches to this origin only. */
export const DASHBOARD_CSP =
  "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const CSS = `
:root { --bg:#f6f7f9; --card:#fff; --ink:#1b1f24; --mute:#6a737d; --line:#e3e6ea; --ok:#1f883d; --warn:#bf8700; --bad:#cf222e; --bar:#3b82f6; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background:var(--bg); color:var(--ink); }
header { display:flex; align-items:baseline; gap:16px; padding:12px 20px; background:#111827; color:#f9fafb; }
header h1 { font-size:18px; margin:0; }
header .meta { color:#9ca3af; font-size:12px; }
header #conn { margin-left:auto; font-size:12px; }
#conn.ok::before { content:"\\25CF  "; color:#4ade80; }
#conn.down::before { content:"\\25CF  "; color:#f87171; }
main { padding:16px 20px; display:grid; gap:16px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
section h2 { font-size:13px; text-transform:uppercase; letter-spacing:.04em; color:var(--mute); margin:0 0 10px; }
.tiles { display:grid; grid-template-columns:repeat(auto-fill, minmax(150px, 1fr)); gap:10px; }
.tile { border:1px solid var(--line); border-radius:6px; padding:8px 10px; }
.tile .v { font-size:22px; font-weight:600; font-variant-numeric:tabular-nums; }
.tile .k { font-size:12px; color:var(--mute); }
table { width:100%; border-collapse:collapse; font-variant-numeric:tabular-nums; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { font-size:12px; color:var(--mute); font-weight:500; }
td.num, th.num { text-align:right; }
.kv { display:flex; align-items:center; gap:8px; min-width:170px; }
.kv .kvv { width:48px; text-align:right; }
.kv .track { flex:1; height:10px; background:#eef0f3; border-radius:5px; position:relative; overflow:hidden; }
.kv .fill { position:absolute; left:0; top:0; bottom:0; background:var(--bar); }
.kv .fill.hot { background:var(--warn); } .kv .fill.full { background:var(--bad); }
.kv .mark { position:absolute; left:90%; top:0; bottom:0; width:1px; background:var(--bad); opacity:.6; }
.badge { display:inline-block; padding:1px 7px; border-radius:9px; font-size:12px; border:1px solid; }
.badge.ok { color:var(--ok); border-color:var(--ok); } .badge.warn { color:var(--warn); border-color:var(--warn); } .badge.bad { color:var(--bad); border-color:var(--bad); }
.empty { color:var(--mute); font-style:italic; }
.two { display:grid; grid-template-columns:1fr 1fr; gap:16px; }
@media (max-width: 900px) { .two { grid-template-columns:1fr; } }
`;

const SCRIPT = `
'use strict';
var $ = function (id) { return document.getElementById(id); };
function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
function pct(x) { return x === null || x === undefined ? '\\u2014' : (x * 100).toFixed(x >= 0.995 || x === 0 ? 0 : 1) + '%'; }
function ms(s) { return s === null || s === undefined ? '\\u2014' : s < 1 ? Math.round(s * 1000) + ' ms' : s.toFixed(2) + ' s'; }
function num(x, d) { return x === null || x === undefined ? '\\u2014' : x.toFixed(d || 0); }
function loras(a) { return !a || a.length === 0 ? '' : ' \\u00b7 LoRA ' + a.slice(0, 3).join(', ') + (a.length > 3 ? ' +' + (a.length - 3) : ''); }
function td(text, cls) { return el('td', cls, text); }
function kvCell(u) {
  var c = el('td'); var w = el('div', 'kv'); var t = el('div', 'track'); var f = el('div', 'fill');
  var v = u === null ? 0 : Math.max(0, Math.min(1, u));
  f.style.width = (v * 100).toFixed(1) + '%';
  if (u !== null && u >= 0.9) f.className = 'fill full'; else if (u !== null && u >= 0.75) f.className = 'fill hot';
  t.appendChild(f); t.appendChild(el('div', 'mark')); w.appendChild(t); w.appendChild(el('span', 'kvv', pct(u))); c.appendChild(w); return c;
}
function badge(w) {
  if (!w.healthy) return el('span', 'badge bad', 'down');
  if (w.circuit === 'open') return el('span', 'badge bad', 'circuit open');
  if (w.circuit === 'half-open' || w.circuit === 'half_open') return el('span', 'badge warn', 'half-open');
  if (w.draining) return el('span', 'badge warn', 'draining');
  if (w.stale) return el('span', 'badge warn', 'stale metrics');
  return el('span', 'badge ok', 'ok');
}
function replace(tbody, rows, emptyText, cols) {
  while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
  if (rows.length === 0) { var tr = el('tr'); var c = el('td', 'empty', emptyText); c.colSpan = cols; tr.appendChild(c); tbody.appendChild(tr); return; }
  rows.forEach(function (r) { tbody.appendChild(r); });
}
function tile(id, text) { $(id).textContent = text; }
function render(s) {
  var t = s.totals;
  tile('requestRate', t.requestRate === null ? '\\u2014' : t.requestRate.toFixed(1) + '/s');
  tile('ttftP50', ms(t.ttftP50)); tile('ttftP99', ms(t.ttftP99)); tile('e2eP99', ms(t.e2eP99));
  tile('tpotP50', ms(t.tpotP50)); tile('tpotP99', ms(t.tpotP99));
  tile('outputTokenRate', t.outputTokenRate === null ? '\\u2014' : t.outputTokenRate.toFixed(0) + '/s');
  tile('inflight', num(t.inflight)); tile('errorRatio', pct(t.errorRatio));
  tile('routedPrefixHit', pct(t.routedPrefixHit)); tile('fleetPrefixHit', pct(t.fleetPrefixHit));
  tile('responseCacheHit', pct(t.responseCacheHit));
  $('window').textContent = s.windowSeconds > 0 ? 'rates over the last ' + s.windowSeconds.toFixed(1) + ' s' : 'collecting\\u2026';
  $('updated').textContent = 'updated ' + new Date(s.at).toLocaleTimeString();
  replace($('workers'), s.workers.map(function (w) {
    var tr = el('tr'); tr.setAttribute('data-worker', w.id);
    tr.appendChild(td(w.id, 'id')); tr.appendChild(td(w.pool + ' \\u00b7 ' + w.model + (w.kind ? ' \\u00b7 ' + w.kind : '') + loras(w.adapters)));
    var b = el('td'); b.appendChild(badge(w)); tr.appendChild(b);
    tr.appendChild(kvCell(w.kvUsage));
    tr.appendChild(td(num(w.running), 'num running')); tr.appendChild(td(num(w.waiting), 'num waiting'));
    tr.appendChild(td(num(w.inflight), 'num inflight')); tr.appendChild(td(num(w.routed), 'num routed'));
    tr.appendChild(td(pct(w.prefixHitRate), 'num hit'));
    var pi = w.prefixIndex;
    tr.appendChild(td(pi ? pi.source + ' \\u00b7 ' + pi.blocks + (pi.capacity ? ' / ' + pi.capacity : '') + ' blocks' : '\\u2014', 'index'));
    return tr;
  }), 'no workers configured', 10);
  replace($('admission'), s.admission.map(function (r) {
    var d = r.decisions; var tr = el('tr');
    tr.appendChild(td(r.model)); tr.appendChild(td(r.priority));
    tr.appendChild(td(num(r.queued), 'num queued-now'));
    tr.appendChild(td(num(d.admitted || 0), 'num')); tr.appendChild(td(num(d.queued || 0), 'num'));
    tr.appendChild(td(num(r.shed), 'num shed'));
    tr.appendChild(td(num((d.queue_full || 0) + (d.queue_timeout || 0)), 'num'));
    tr.appendChild(td(num(d.rate_limited || 0), 'num'));
    return tr;
  }), 'admission control is off', 8);
  replace($('fleetKv'), s.fleetKv.map(function (k) { var tr = el('tr'); tr.appendChild(td(k.model)); tr.appendChild(kvCell(k.usage)); return tr; }), 'no estimate (admission control is off)', 2);
  replace($('spec'), s.speculative.map(function (x) {
    var tr = el('tr'); tr.appendChild(td(x.name));
    tr.appendChild(td(Object.keys(x.labels).map(function (k) { return k + '=' + x.labels[k]; }).join(', ')));
    tr.appendChild(td(pct(x.value), 'num')); return tr;
  }), 'no speculative cascade is exporting acceptance', 3);
}
var failures = 0;
function poll() {
  fetch('dashboard/state', { cache: 'no-store', credentials: 'same-origin' }).then(function (r) {
    if (!r.ok) throw new Error('HTTP ' + r.status);
    return r.json();
  }).then(function (s) {
    failures = 0; $('conn').className = 'ok'; $('conn').textContent = 'live'; render(s);
  }).catch(function (e) {
    failures++; $('conn').className = 'down'; $('conn').textContent = 'no data (' + e.message + ')';
  }).then(function () { setTimeout(poll, failures > 0 ? Math.min(10000, 1000 * failures) : 1000); });
}
poll();
`;

function tileHtml(id: string, label: string): string {
  return `<div class="tile"><div class="v" id="${id}">—</div><div class="k">${label}</div></div>`;
}

/** The page, as served (about 10 kB). */
export function dashboardPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvgate · fleet</title>
<link rel="icon" href="data:,">
<style>${CSS}</style>
</head>
<body>
<header><h1>kvgate · fleet</h1><span class="meta" id="window">collecting…</span><span class="meta" id="updated"></span><span id="conn">connecting…</span></header>
<main>
<section><h2>Traffic</h2><div class="tiles">
${tileHtml('requestRate', 'requests / s')}
${tileHtml('ttftP50', 'TTFT p50 (streamed)')}
${tileHtml('ttftP99', 'TTFT p99 (streamed)')}
${tileHtml('tpotP50', 'TPOT p50 (streamed)')}
${tileHtml('tpotP99', 'TPOT p99 (streamed)')}
${tileHtml('e2eP99', 'end-to-end p99')}
${tileHtml('outputTokenRate', 'output tokens / s')}
${tileHtml('inflight', 'in flight')}
${tileHtml('errorRatio', '5xx share')}
${tileHtml('routedPrefixHit', 'prefix hit expected by the router')}
${tileHtml('fleetPrefixHit', 'prefix-cache hit (workers)')}
${tileHtml('responseCacheHit', 'response-cache hit')}
</div></section>
<section><h2>Workers</h2><table>
<thead><tr><th>worker</th><th>pool · model</th><th>state</th><th>KV cache (line: 90%)</th><th class="num">running</th><th class="num">waiting</th><th class="num">in flight</th><th class="num">routed</th><th class="num">prefix hit</th><th>prefix index</th></tr></thead>
<tbody id="workers"></tbody></table></section>
<div class="two">
<section><h2>Admission by priority (in the window)</h2><table>
<thead><tr><th>model</th><th>priority</th><th class="num">waiting now</th><th class="num">admitted</th><th class="num">queued</th><th class="num">shed</th><th class="num">queue full / timed out</th><th class="num">rate limited</th></tr></thead>
<tbody id="admission"></tbody></table></section>
<section><h2>Fleet KV estimate</h2><table><thead><tr><th>model</th><th>usage (last scrape + reserved − freed since, or in-flight peak)</th></tr></thead><tbody id="fleetKv"></tbody></table>
<h2 style="margin-top:14px">Speculative acceptance</h2><table><thead><tr><th>series</th><th>labels</th><th class="num">acceptance</th></tr></thead><tbody id="spec"></tbody></table></section>
</div>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;
}
