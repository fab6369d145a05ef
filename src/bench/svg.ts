/**
 * Minimal SVG charts for the bench report: line charts (CDFs, time series) and bar charts,
 * rendered to strings with no external code.
 */

export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

export interface Series {
  name: string;
  color: string;
  /** [x, y] pairs. */
  points: Array<[number, number]>;
  /** Draw a dot at every point (measured points, e.g. capacity probes). */
  markers?: boolean;
  /** SVG stroke-dasharray, e.g. '4 3' for a reference line. */
  dash?: string;
}

export interface LineChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  width?: number;
  height?: number;
  logX?: boolean;
  yMin?: number;
  yMax?: number;
  legend?: boolean;
  /** Corner of the plot the legend goes in (default top-left). */
  legendCorner?: 'top-left' | 'bottom-left';
}

const fmt = (v: number): string => {
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(0)}k`;
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1).replace(/\.0$/, '');
  if (a === 0) return '0';
  return v.toPrecision(2);
};

function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) return [lo];
  const step0 = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0) ?? step0;
  const out: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Math.round(t / step) * step);
  return out;
}

/** 1-2-5 ticks per decade, thinned to 1s only when the range spans many decades. */
function logTicks(lo: number, hi: number): number[] {
  const decades = Math.log10(hi / lo);
  const steps = decades > 4 ? [1] : [1, 2, 5];
  const out: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of steps) {
      const t = m * 10 ** e;
      if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) out.push(t);
    }
  }
  return out;
}

export function lineChart(series: readonly Series[], o: LineChartOptions): string {
  const W = o.width ?? 520;
  const H = o.height ?? 300;
  const m = { l: 56, r: 12, t: 28, b: 44 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  let xLo = Infinity;
  let xHi = -Infinity;
  let yLo = Infinity;
  let yHi = -Infinity;
  for (const s of series) {
    for (const [x, y] of s.points) {
      if (o.logX && !(x > 0)) continue;
      xLo = Math.min(xLo, x);
      xHi = Math.max(xHi, x);
      yLo = Math.min(yLo, y);
      yHi = Math.max(yHi, y);
    }
  }
  if (!Number.isFinite(xLo)) {
    xLo = o.logX ? 1 : 0;
    xHi = xLo * 10 || 1;
    yLo = 0;
    yHi = 1;
  }
  if (o.yMin !== undefined) yLo = o.yMin;
  if (o.yMax !== undefined) yHi = o.yMax;
  if (yHi <= yLo) yHi = yLo + 1;
  const logX = o.logX === true;
  if (xHi <= xLo) xHi = logX ? xLo * 10 : xLo + 1;
  const lx = (x: number) => (logX ? Math.log10(x) : x);
  const X = (x: number) => m.l + ((lx(x) - lx(xLo)) / (lx(xHi) - lx(xLo))) * pw;
  const Y = (y: number) => m.t + ph - ((y - yLo) / (yHi - yLo)) * ph;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(o.title)}">`);
  parts.push(`<text x="${W / 2}" y="16" text-anchor="middle" class="title">${esc(o.title)}</text>`);
  // Axes and grid.
  const xTicks = logX ? logTicks(xLo, xHi) : niceTicks(xLo, xHi);
  for (const t of xTicks) {
    const x = X(t).toFixed(1);
    parts.push(`<line x1="${x}" y1="${m.t}" x2="${x}" y2="${m.t + ph}" class="grid"/>`);
    parts.push(`<text x="${x}" y="${m.t + ph + 14}" text-anchor="middle" class="tick">${fmt(t)}</text>`);
  }
  for (const t of niceTicks(yLo, yHi)) {
    const y = Y(t).toFixed(1);
    parts.push(`<line x1="${m.l}" y1="${y}" x2="${m.l + pw}" y2="${y}" class="grid"/>`);
    parts.push(`<text x="${m.l - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" class="tick">${fmt(t)}</text>`);
  }
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" class="frame"/>`);
  parts.push(`<text x="${m.l + pw / 2}" y="${H - 8}" text-anchor="middle" class="label">${esc(o.xLabel)}</text>`);
  parts.push(`<text transform="translate(14 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle" class="label">${esc(o.yLabel)}</text>`);
  for (const s of series) {
    const pts = s.points.filter(([x]) => !logX || x > 0);
    if (pts.length === 0) continue;
    const d = pts.map(([x, y], i) => `${i === 0 ? 'M' : 'L'}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join('');
    const dash = s.dash ? ` stroke-dasharray="${esc(s.dash)}"` : '';
    parts.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.6"${dash}><title>${esc(s.name)}</title></path>`);
    if (s.markers) {
      for (const [x, y] of pts) {
        parts.push(`<circle cx="${X(x).toFixed(1)}" cy="${Y(y).toFixed(1)}" r="3" fill="${s.color}"><title>${esc(`${s.name}: ${fmt(x)}, ${fmt(y)}`)}</title></circle>`);
      }
    }
  }
  if (o.legend !== false) {
    const top = o.legendCorner === 'bottom-left' ? m.t + ph - 14 * series.length : m.t + 10;
    series.forEach((s, i) => {
      const y = top + i * 14;
      parts.push(`<rect x="${m.l + 8}" y="${y - 8}" width="10" height="10" fill="${s.color}"/>`);
      parts.push(`<text x="${m.l + 22}" y="${y + 1}" class="legend">${esc(s.name)}</text>`);
    });
  }
  parts.push('</svg>');
  return parts.join('');
}

export interface Bar {
  label: string;
  value: number;
  color: string;
}

export function barChart(bars: readonly Bar[], o: { title: string; unit: string; width?: number; percent?: boolean }): string {
  const W = o.width ?? 420;
  const rowH = 24;
  const m = { l: 150, r: 70, t: 28, b: 8 };
  const H = m.t + m.b + rowH * bars.length;
  const max = Math.max(1e-12, ...bars.map((b) => b.value));
  const pw = W - m.l - m.r;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(o.title)}">`);
  parts.push(`<text x="${W / 2}" y="16" text-anchor="middle" class="title">${esc(o.title)}</text>`);
  bars.forEach((b, i) => {
    const y = m.t + i * rowH;
    const w = Math.max(0, (b.value / max) * pw);
    const val = o.percent ? `${(b.value * 100).toFixed(1)}%` : `${fmt(b.value)}${o.unit ? ` ${o.unit}` : ''}`;
    parts.push(`<text x="${m.l - 6}" y="${y + rowH / 2}" text-anchor="end" dominant-baseline="middle" class="tick">${esc(b.label)}</text>`);
    parts.push(`<rect x="${m.l}" y="${y + 4}" width="${w.toFixed(1)}" height="${rowH - 8}" fill="${b.color}"/>`);
    parts.push(`<text x="${(m.l + w + 4).toFixed(1)}" y="${y + rowH / 2}" dominant-baseline="middle" class="tick">${esc(val)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('');
}
