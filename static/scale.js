// The Scale page's charts (app/web/scale.py): every layout the search evaluated as a point,
// bytes per GPU against step time (log-log: both span orders of magnitude), those that fit
// apart from those that do not, the chosen one ringed and the GPU's memory a dashed line; and
// the listed layouts' step times stacked by kind. Registered with app.js's charts, which draws
// them after a swap (this file loads after app.js; both run before DOMContentLoaded).
(function () {
  "use strict";
  const { color, sig, axes, draw } = window.Tally;

  const KIND_COLORS = {
    compute: "#1f6feb", recompute: "#54aeff", tensor_parallel: "#8250df", expert_parallel: "#bf3989",
    pipeline_p2p: "#1b7c83", pipeline_bubble: "#d4a72c", data_parallel: "#cf222e",
  };

  function drawLayoutScatter(canvas, spec) {
    const all = spec.fits.concat(spec.over);
    const xs = all.map((p) => p.x), ys = all.map((p) => p.y).concat([spec.memory_gb]);
    // A little room each side, so a point at either end is not cut in half.
    const lo = Math.min(...xs) / 1.15, hi = Math.max(...xs) * 1.15;
    const good = color("--good") || "#1a7f37", bad = color("--bad") || "#cf222e";
    // Dots a little transparent, so where layouts crowd together reads darker.
    const faded = (c) => (/^#[0-9a-f]{6}$/i.test(c) ? c + "99" : c);
    const datasets = [];
    if (spec.chosen) {
      datasets.push({ label: "chosen: " + spec.chosen.label, data: [spec.chosen], pointStyle: "circle",
                      pointRadius: 9, pointHoverRadius: 10, borderColor: color("--fg"), borderWidth: 2.5,
                      backgroundColor: "transparent", order: 0 });
    }
    datasets.push(
      { label: "fits", data: spec.fits, pointStyle: "circle", pointRadius: 3, backgroundColor: faded(good),
        borderColor: good, borderWidth: 1, order: 2 },
      { label: "does not fit", data: spec.over, pointStyle: "crossRot", pointRadius: 4, borderWidth: 1.5,
        borderColor: bad, backgroundColor: bad, order: 3 },
      { type: "line", label: spec.memory_label + " (" + sig(spec.memory_gb) + " GB)",
        data: [{ x: lo, y: spec.memory_gb }, { x: hi, y: spec.memory_gb }], borderColor: color("--fg"),
        borderDash: [6, 4], borderWidth: 2, pointRadius: 0, pointHoverRadius: 0, pointStyle: "line", order: 1 },
    );
    const scales = axes("seconds per step", "GB per GPU", true, true);
    Object.assign(scales.x, { min: lo, max: hi });
    Object.assign(scales.y, { min: Math.min(...ys) / 1.25, max: Math.max(...ys) * 1.25 });
    return new Chart(canvas, {
      type: "scatter", data: { datasets },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false, scales,
        plugins: {
          legend: { labels: { color: color("--fg"), usePointStyle: true, boxWidth: 10 } },
          tooltip: {
            filter: (c) => c.dataset.type !== "line",
            callbacks: { label: (c) => `${c.raw.label}: ${sig(c.raw.x)} s, ${sig(c.raw.y)} GB` },
          },
        },
      },
    });
  }

  function drawStepBars(canvas, spec) {
    const datasets = spec.kinds.map((kind, i) => ({
      label: spec.names[i], data: spec.bars.map((b) => b[kind]), backgroundColor: KIND_COLORS[kind],
      stack: "step",
    }));
    return new Chart(canvas, {
      type: "bar", data: { labels: spec.bars.map((b) => b.label), datasets },
      options: {
        animation: false, maintainAspectRatio: false, indexAxis: "y",
        scales: {
          x: { stacked: true, beginAtZero: true, title: { display: true, text: "seconds per step" },
               ticks: { color: color("--muted"), callback: (v) => sig(v, 2) } },
          y: { stacked: true, ticks: { color: color("--muted") } },
        },
        plugins: {
          legend: { labels: { color: color("--fg"), boxWidth: 14 } },
          tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${sig(c.parsed.x)} s` } },
        },
      },
    });
  }

  draw.layout_scatter = drawLayoutScatter;
  draw.step_bars = drawStepBars;
})();
