// Tally's pages: draw charts from the JSON a fragment carries, and put each API error
// beside its field. Everything here runs after htmx swaps a result in, and on load.
(function () {
  "use strict";
  const charts = new WeakMap();

  function color(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function drawDaysVsGpus(canvas, spec) {
    return new Chart(canvas, {
      type: "line",
      data: {
        datasets: [
          { label: "days", data: spec.points, borderColor: color("--accent"), pointRadius: 3 },
          { label: "this run", data: [spec.current], type: "scatter", pointRadius: 6,
            backgroundColor: color("--warn") || "#d4a72c" },
        ],
      },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false,
        scales: {
          x: { type: "logarithmic", title: { display: true, text: "GPUs" }, ticks: { color: color("--muted") } },
          y: { type: "logarithmic", title: { display: true, text: "days" }, ticks: { color: color("--muted") } },
        },
        plugins: { legend: { labels: { color: color("--fg") } } },
      },
    });
  }

  const KIND_COLORS = {
    parameters: "#1f6feb", gradients: "#8250df", optimizer_state: "#bf3989", master_weights: "#d4a72c",
    weight_copies: "#1b7c83", activations: "#2da44e", transient: "#9198a1",
  };

  function drawMemoryStack(canvas, spec) {
    const labels = spec.bars.map((b) => b.label);
    const datasets = spec.kinds.map((kind) => ({
      label: kind.replace("_", " "), data: spec.bars.map((b) => b[kind]), backgroundColor: KIND_COLORS[kind],
      stack: "memory",
    }));
    if (spec.capacity_gb !== null) {
      datasets.push({ type: "line", label: spec.gpu + " memory", data: labels.map(() => spec.capacity_gb),
                      borderColor: color("--bad") || "#cf222e", borderDash: [6, 4], pointRadius: 0 });
    }
    return new Chart(canvas, {
      type: "bar", data: { labels, datasets },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: {
          x: { stacked: true, ticks: { color: color("--muted") } },
          y: { stacked: true, title: { display: true, text: "GB per GPU" }, ticks: { color: color("--muted") } },
        },
        plugins: { legend: { labels: { color: color("--fg") } } },
      },
    });
  }

  function drawFlopsParts(canvas, spec) {
    return new Chart(canvas, {
      type: "bar",
      data: {
        labels: spec.labels,
        datasets: [
          { label: "forward", data: spec.forward, backgroundColor: color("--accent"), stack: "step" },
          { label: "backward", data: spec.backward, backgroundColor: "#8250df", stack: "step" },
        ],
      },
      options: {
        animation: false, maintainAspectRatio: false, indexAxis: "y",
        scales: {
          x: { stacked: true, title: { display: true, text: "FLOPs per step" },
               ticks: { color: color("--muted"), callback: (v) => (v === 0 ? "0" : Number(v).toExponential(1)) } },
          y: { stacked: true, ticks: { color: color("--muted") } },
        },
        plugins: { legend: { labels: { color: color("--fg") } } },
      },
    });
  }

  const DRAW = { days_vs_gpus: drawDaysVsGpus, memory_stack: drawMemoryStack, flops_parts: drawFlopsParts };

  function render(root) {
    root.querySelectorAll("canvas[data-chart]").forEach((canvas) => {
      if (charts.has(canvas) || typeof Chart === "undefined") return;
      const spec = JSON.parse(canvas.dataset.chart);
      charts.set(canvas, DRAW[spec.type](canvas, spec));
    });
    root.querySelectorAll("template[data-errors]").forEach((tpl) => {
      const errors = JSON.parse(tpl.dataset.errors);
      document.querySelectorAll("[data-error-for]").forEach((out) => {
        const message = errors[out.dataset.errorFor] || "";
        out.textContent = message;
        const input = document.getElementById(out.dataset.errorFor);
        if (input) input.setAttribute("aria-invalid", message ? "true" : "false");
      });
    });
  }

  document.addEventListener("DOMContentLoaded", () => render(document));
  document.addEventListener("htmx:afterSwap", (event) => render(event.detail.target));
})();
