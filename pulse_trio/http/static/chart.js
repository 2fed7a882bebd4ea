// The overview's throughput chart: one bar per minute over the last hour, drawn with SVG
// elements and attributes (no inline style), succeeded below and every other ending above.

import { svg } from "./dom.js";

const WIDTH = 180;
const HEIGHT = 36;

export function throughputChart(perMinute, { label = "finished per minute" } = {}) {
  const ok = perMinute.SUCCEEDED ?? [];
  const minutes = ok.length;
  const bad = ok.map((_, i) => Object.entries(perMinute)
    .filter(([status]) => status !== "SUCCEEDED")
    .reduce((sum, [, series]) => sum + (series[i] ?? 0), 0));
  const totals = ok.map((n, i) => n + bad[i]);
  const top = Math.max(0, ...totals);
  const peak = Math.max(1, top);
  const finished = totals.reduce((a, b) => a + b, 0);
  const failed = bad.reduce((a, b) => a + b, 0);
  const summary = `${label}: ${finished} finished in the last hour (${failed} not succeeded), peak ${top}/min`;
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT,
    role: "img", "aria-label": summary, preserveAspectRatio: "none" }, svg("title", {}, summary));
  const step = WIDTH / Math.max(1, minutes);
  chart.append(svg("rect", { class: "baseline", x: 0, y: HEIGHT - 1, width: WIDTH, height: 1 }));
  totals.forEach((total, i) => {
    if (!total) return;
    const okHeight = (ok[i] / peak) * (HEIGHT - 2);
    const badHeight = (bad[i] / peak) * (HEIGHT - 2);
    const x = (i * step + 0.5).toFixed(2);
    const width = Math.max(1, step - 1).toFixed(2);
    if (ok[i]) {
      chart.append(svg("rect", { class: "ok", x, width, y: (HEIGHT - 1 - okHeight).toFixed(2),
        height: okHeight.toFixed(2) }));
    }
    if (bad[i]) {
      chart.append(svg("rect", { class: "bad", x, width, y: (HEIGHT - 1 - okHeight - badHeight).toFixed(2),
        height: badHeight.toFixed(2) }));
    }
  });
  return chart;
}
