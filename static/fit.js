// The "Will it run on my GPU?" page's bars (app/web/fit.py): one horizontal bar per option,
// GB per GPU stacked by kind, a red tick on each bar at the memory that option may use, and the
// GPU's memory as a dashed line across them all. Registered with app.js's charts, which draws
// it after a swap like any other (this file loads after app.js; both run before DOMContentLoaded).
(function () {
  "use strict";
  const { color, sig, kindColors, draw } = window.Tally;
  const words = (kind) => kind.replace(/_/g, " ");
  // A tick's half-length: half its bar's height and a little more, so it crosses the bar
  // (Chart.js lays the bars out before it draws the points).
  function across(c) {
    const bar = c.chart.getDatasetMeta(0).data[c.dataIndex];
    return bar && bar.height ? bar.height / 2 + 3 : 10;
  }

  function drawFitBars(canvas, spec) {
    const labels = spec.rows.map((r) => r.short);
    const datasets = spec.kinds.map((kind) => ({
      label: words(kind), data: spec.rows.map((r) => r[kind]), backgroundColor: kindColors[kind],
      stack: "bytes", order: 2,
    }));
    // Each mark alone in its stack, so the stacked axis leaves its value as it is.
    const bad = color("--bad") || "#cf222e";
    datasets.push({
      type: "scatter", label: "usable memory", stack: "usable", order: 0,
      data: spec.rows.map((r) => ({ x: r.usable, y: r.short })),
      pointStyle: "line", rotation: 90, borderColor: bad, backgroundColor: bad, borderWidth: 3,
      pointRadius: across, pointHoverRadius: across,
    });
    // The GPU's memory from the bottom of the plot to its top: on a hidden 0-1 axis beside the
    // options' category axis, which can place a point only at a bar's centre.
    datasets.push({
      type: "line", label: spec.memory_label, stack: "memory", order: 1, yAxisID: "span",
      data: [{ x: spec.memory_gb, y: 0 }, { x: spec.memory_gb, y: 1 }],
      borderColor: color("--fg"), borderDash: [6, 4], borderWidth: 2, pointRadius: 0, pointHoverRadius: 0,
    });
    return new Chart(canvas, {
      type: "bar", data: { labels, datasets },
      options: {
        animation: false, maintainAspectRatio: false, indexAxis: "y",
        scales: {
          x: { type: "linear", stacked: true, beginAtZero: true, title: { display: true, text: "GB per GPU" },
               ticks: { color: color("--muted"), callback: (v) => sig(v, 2) } },
          y: { type: "category", stacked: true, ticks: { color: color("--muted") } },
          span: { type: "linear", min: 0, max: 1, display: false },
        },
        plugins: {
          legend: { labels: { color: color("--fg"), boxWidth: 14 } },
          tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${sig(c.parsed.x)} GB` } },
        },
      },
    });
  }

  draw.fit_bars = drawFitBars;
})();
