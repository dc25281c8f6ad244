// The Serving page's charts (app/web/serving.py): lines of points with dashed ones beside them, SLO
// targets as horizontal lines and the asked rate as a vertical one. Registered with app.js's charts,
// which draws them after a swap (this file loads after app.js; both run before DOMContentLoaded).
(function () {
  "use strict";
  const { color, axes, draw } = window.Tally;
  const PALETTE = ["#1f6feb", "#8250df", "#1b7c83", "#bf3989"];

  function drawSeriesLines(canvas, spec) {
    const all = spec.series.flatMap((s) => s.points);
    const xs = all.map((p) => p.x), ys = all.map((p) => p.y).concat(spec.hlines.map((h) => h.y));
    const lo = Math.min(...xs), hi = Math.max(...xs);
    const sets = spec.series.map((s, i) => {
      const c = PALETTE[Math.floor(i / (spec.series.length > 2 ? 2 : 1)) % PALETTE.length];
      return { label: s.label, data: s.points, borderColor: c, backgroundColor: c, borderDash: s.dash ? [6, 4] : [],
               pointRadius: s.points.length > 40 ? 0 : 3, borderWidth: 2 };
    });
    spec.hlines.forEach((h) => sets.push({ label: h.label, data: [{ x: lo, y: h.y }, { x: hi, y: h.y }],
                                           borderColor: color("--bad") || "#cf222e", borderDash: [2, 3],
                                           pointRadius: 0, borderWidth: 2 }));
    const ylo = ys.length ? Math.min(...ys) : 0, yhi = ys.length ? Math.max(...ys) : 1;
    spec.vlines.forEach((v) => sets.push({ label: v.label, data: [{ x: v.x, y: ylo }, { x: v.x, y: yhi }],
                                           borderColor: color("--fg"), borderDash: [6, 4], pointRadius: 0,
                                           borderWidth: 1.5 }));
    const scales = axes(spec.x, spec.y, false, !!spec.log_y);
    if (spec.max_y !== undefined) Object.assign(scales.y, { min: 0, max: spec.max_y });
    return new Chart(canvas, {
      type: "line", data: { datasets: sets },
      options: { animation: false, maintainAspectRatio: false, parsing: false, scales,
                 plugins: { legend: { labels: { color: color("--fg") } } } },
    });
  }

  Object.assign(draw, { series_lines: drawSeriesLines });
})();
