// Tally's pages: draw charts from the JSON a fragment carries, and put each API error
// beside its field. Everything here runs after htmx swaps a result in, and on load.
(function () {
  "use strict";
  const charts = new WeakMap();

  // Numbers as app/numbers.py writes them: three significant figures, plain digits from
  // 0.001 to a million, a power of ten outside; counts in short scale (K, M, B, T).
  const SUPER = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
  function sig(x, figures = 3) {
    x = Number(x);
    if (x === 0 || Object.is(x, -0)) return "0";
    if (!Number.isFinite(x)) return String(x);
    let exponent = Math.floor(Math.log10(Math.abs(x)));
    let mantissa = Number((x / 10 ** exponent).toFixed(figures - 1));
    if (Math.abs(mantissa) >= 10) { mantissa /= 10; exponent += 1; }
    if (exponent >= -3 && exponent < 6) {
      const decimals = Math.max(figures - 1 - exponent, 0);
      return Number(x.toFixed(decimals)).toLocaleString("en-US", { minimumFractionDigits: decimals,
                                                                    maximumFractionDigits: decimals });
    }
    return mantissa.toFixed(figures - 1) + " × 10" + String(exponent).split("").map((c) => SUPER[c]).join("");
  }
  function amount(x) {
    for (const [scale, name] of [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]]) {
      if (Math.abs(x) >= scale) {
        const v = x / scale;
        return (Math.abs(v) < 100 ? v.toFixed(1) : Math.round(v).toLocaleString("en-US")) + " " + name;
      }
    }
    return Number.isInteger(x) ? x.toLocaleString("en-US") : sig(x);
  }
  window.Tally = { sig, amount };

  function color(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // Tick values for a log axis: 1-2-5 in each decade where the axis has room for them, else
  // powers of ten, else every few decades; never two labels closer than `gap` pixels.
  function logTicks(scale, gap) {
    const lo = scale.min, hi = scale.max;
    const length = scale.isHorizontal() ? scale.width : scale.height;
    const perDecade = length / Math.max(Math.log10(hi / lo), 1e-9);
    const steps = perDecade * Math.log10(2) >= gap ? [1, 2, 5] : [1];
    const every = steps.length > 1 ? 1 : Math.max(1, Math.ceil(gap / perDecade));
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e += 1) {
      if (every > 1 && e % every !== 0) continue;
      steps.forEach((m) => {
        const v = Number((m * 10 ** e).toPrecision(1));
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push({ value: v });
      });
    }
    scale.ticks = out;
  }

  // Days against GPUs over a range the server centred on this run (1/16 to 16 times its GPUs).
  function drawDaysVsGpus(canvas, spec) {
    const xs = spec.points.map((p) => p.x), ys = spec.points.map((p) => p.y);
    const scales = axes("GPUs", "days", true, true);
    Object.assign(scales.x, { min: Math.min(...xs), max: Math.max(...xs) });
    Object.assign(scales.y, { min: Math.min(...ys), max: Math.max(...ys) });
    return new Chart(canvas, {
      type: "line",
      data: {
        datasets: [
          { label: "days", data: spec.points, borderColor: color("--accent"), pointRadius: 3, order: 1 },
          { label: spec.current.label || "this run", data: [spec.current], type: "scatter", pointRadius: 7,
            backgroundColor: color("--warn") || "#d4a72c", order: 0 },
        ],
      },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false, scales,
        plugins: { legend: { labels: { color: color("--fg") } } },
      },
    });
  }

  const KIND_COLORS = {
    parameters: "#1f6feb", gradients: "#8250df", optimizer_state: "#bf3989", master_weights: "#d4a72c",
    weight_copies: "#1b7c83", activations: "#2da44e", transient: "#9198a1",
    // What the start of backward does not hold: the inputs (token ids), and the step's peak moment
    // beyond it (app/accounting/training/phases.py).
    inputs: "#6e7781", peak_phase_extra: "#fb8f44",
    // The Inference page's stack (app/web/inference.py KINDS).
    weights: "#1f6feb", kv_cache: "#2da44e", workspace: "#d4a72c", overhead: "#9198a1",
    // Fine-tuning's (the fit page): the frozen base, lighter than the weights that train.
    frozen_weights: "#54aeff", trainable_weights: "#1f6feb",
  };

  // Stacked GB per GPU by kind, one bar per ZeRO stage (or data-parallel ranks, or sequence
  // length, or concurrency: spec.x says which), and the GPU's capacity as a dashed line drawn
  // over the bars. spec.current (optional): the index of the request's own bar, outlined.
  function drawMemoryStack(canvas, spec) {
    const labels = spec.bars.map((b) => b.label);
    const mine = (i) => spec.current !== undefined && i === spec.current;
    const datasets = spec.kinds.map((kind) => ({
      label: (spec.labels && spec.labels[kind]) || kind.replace("_", " "), data: spec.bars.map((b) => b[kind]),
      backgroundColor: KIND_COLORS[kind],
      borderColor: color("--fg"), borderWidth: spec.bars.map((b, i) => (mine(i) ? 2 : 0)),
      stack: "memory", order: 1,
    }));
    if (spec.capacity_gb !== null) {
      // order 0: Chart.js draws higher orders first, so the line lands on top of taller bars.
      datasets.push({ type: "line", label: spec.capacity_label || spec.gpu + " memory",
                      data: labels.map(() => spec.capacity_gb),
                      borderColor: color("--bad") || "#cf222e", borderDash: [6, 4], pointRadius: 0,
                      borderWidth: 2, stack: "capacity", order: 0 });
    }
    return new Chart(canvas, {
      type: "bar", data: { labels, datasets },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: {
          x: { stacked: true, title: { display: Boolean(spec.x), text: spec.x || "" }, ticks: { color: color("--muted") } },
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
               ticks: { color: color("--muted"), callback: short } },
          y: { stacked: true, ticks: { color: color("--muted") } },
        },
        plugins: { legend: { labels: { color: color("--fg") } } },
      },
    });
  }

  // A model's parameters (the model pages): two stacked bars, all of them and those one token
  // reads, one segment per component; counts written as the pages write them (46.7 B).
  function drawParamParts(canvas, spec) {
    const datasets = spec.parts.map((part, i) => ({
      label: part.label, data: part.values, backgroundColor: PALETTE[i % PALETTE.length], stack: "params" }));
    const scales = axes("parameters", "", false, false);
    scales.x = { ...scales.x, stacked: true, min: 0, ticks: { ...scales.x.ticks, callback: (v) => amount(v) } };
    scales.y = { stacked: true, ticks: { color: color("--muted") } };
    return new Chart(canvas, {
      type: "bar", data: { labels: spec.bars, datasets },
      options: {
        animation: false, maintainAspectRatio: false, indexAxis: "y", scales,
        plugins: {
          legend: { labels: { color: color("--fg") } },
          tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${amount(c.raw)} (${sig(c.raw)})` } },
        },
      },
    });
  }

  const PALETTE = ["#1f6feb", "#8250df", "#2da44e", "#bf3989", "#d4a72c", "#1b7c83", "#cf222e", "#9198a1"];
  const DTYPE_COLORS = { float32: "#1f6feb", tfloat32: "#1b7c83", bfloat16: "#8250df", float16: "#bf3989",
                         float8_e4m3fn: "#d4a72c" };
  const dtypeColor = (dtype, i) => DTYPE_COLORS[dtype] || PALETTE[i % PALETTE.length];

  // A tick label with as few figures as its value needs (at most 3): 0.002, 0.0015, 64, 1,000.
  function short(v) {
    const full = Number(Number(v).toPrecision(3));
    for (const f of [1, 2]) if (Number(Number(v).toPrecision(f)) === full) return sig(v, f);
    return sig(v, 3);
  }

  // Log axes take 1-2-5 ticks spaced for their labels (logTicks) unless the range is too
  // narrow to hold two of them; every label is written by the pages' rules.
  function axes(x, y, logX, logY) {
    const axis = (text, log, gap) => ({
      type: log ? "logarithmic" : "linear", title: { display: true, text },
      ticks: { color: color("--muted"), maxRotation: 0, callback: short },
      afterBuildTicks: log ? (scale) => {
        const built = scale.ticks;
        logTicks(scale, gap);
        if (scale.ticks.length < 2) scale.ticks = built;
      } : undefined,
    });
    return { x: axis(x, logX, 70), y: axis(y, logY, 24) };
  }

  function lines(canvas, datasets, scales) {
    return new Chart(canvas, {
      type: "line", data: { datasets },
      options: { animation: false, maintainAspectRatio: false, parsing: false, scales,
                 plugins: { legend: { labels: { color: color("--fg") } } } },
    });
  }

  function drawMatmulSizes(canvas, spec) {
    const sets = [];
    Object.entries(spec.series).forEach(([dtype, points], i) => {
      const c = dtypeColor(dtype, i);
      sets.push({ label: dtype, data: points, borderColor: c, backgroundColor: c });
      const peak = spec.peaks[dtype];
      if (peak !== null && peak !== undefined) {
        const xs = points.map((p) => p.x);
        sets.push({ label: dtype + " peak", data: [{ x: Math.min(...xs), y: peak }, { x: Math.max(...xs), y: peak }],
                    borderColor: c, borderDash: [6, 4], pointRadius: 0 });
      }
    });
    return lines(canvas, sets, axes("m (rows of A)", "TFLOP/s", true, false));
  }

  function drawRoofline(canvas, spec) {
    const xs = spec.points.map((p) => p.x);
    const lo = Math.min(...xs) / 2, hi = Math.max(...xs) * 2;
    const sets = [];
    const byDtype = {};
    spec.points.forEach((p) => { (byDtype[p.dtype] = byDtype[p.dtype] || []).push(p); });
    Object.entries(byDtype).forEach(([dtype, points], i) => {
      sets.push({ label: dtype, data: points, showLine: false, pointRadius: 4, backgroundColor: dtypeColor(dtype, i) });
    });
    const ceiling = { borderColor: color("--bad") || "#cf222e", pointRadius: 0 };
    const bw = spec.bandwidth_gb_per_sec === null ? null : spec.bandwidth_gb_per_sec / 1e3;  // TB/s
    const top = spec.compute_tflop_per_sec;
    if (bw !== null && top !== null) {
      const knee = top / bw;  // FLOP/byte where the two ceilings meet
      const roof = [{ x: lo, y: Math.min(bw * lo, top) }];  // flat from the start when the knee lies left of it
      if (knee > lo && knee < hi) roof.push({ x: knee, y: top });
      roof.push({ x: hi, y: Math.min(bw * hi, top) });
      sets.push({ label: "measured ceilings", data: roof, ...ceiling });
    } else if (bw !== null) {  // the page says which ceiling is missing, and offers its probe
      sets.push({ label: "measured bandwidth", data: [{ x: lo, y: bw * lo }, { x: hi, y: bw * hi }], ...ceiling });
    } else if (top !== null) {
      sets.push({ label: "measured compute", data: [{ x: lo, y: top }, { x: hi, y: top }], ...ceiling });
    }
    return lines(canvas, sets, axes("arithmetic intensity (FLOP/byte)", "TFLOP/s", true, true));
  }

  // The accuracy ledger: each pair a point (measured across, predicted up), one colour per mode,
  // and the diagonal where a prediction is exact; log scales, as pairs span decades.
  function drawPredictedMeasured(canvas, spec) {
    const sets = [];
    let lo = Infinity, hi = 0;
    Object.entries(spec.series).forEach(([mode, points], i) => {
      points.forEach((p) => { lo = Math.min(lo, p.x, p.y); hi = Math.max(hi, p.x, p.y); });
      sets.push({ label: mode, data: points, showLine: false, pointRadius: 4,
                  backgroundColor: PALETTE[i % PALETTE.length], borderColor: PALETTE[i % PALETTE.length] });
    });
    sets.push({ label: "exact", data: [{ x: lo, y: lo }, { x: hi, y: hi }], borderColor: color("--muted"),
                borderDash: [6, 4], pointRadius: 0 });
    return lines(canvas, sets, axes("measured " + spec.metric, "predicted", true, true));
  }

  function drawTransferSizes(canvas, spec) {
    const sets = Object.entries(spec.series).map(([label, points], i) => ({
      label, data: points, borderColor: PALETTE[i % PALETTE.length], backgroundColor: PALETTE[i % PALETTE.length],
      borderDash: label.includes("pageable") ? [5, 3] : [],
    }));
    return lines(canvas, sets, axes("bytes", "GB/s", true, false));
  }

  // busbw against message size per collective (the collectives job page): measured points,
  // the fitted model dashed, the catalogue link's engine line dotted, one colour per collective.
  function drawCollectiveBusbw(canvas, spec) {
    const sets = [];
    spec.series.forEach((s, i) => {
      const c = PALETTE[i % PALETTE.length], op = s.collective;
      sets.push({ label: op, data: s.measured, borderColor: c, backgroundColor: c, showLine: false, pointRadius: 4 });
      sets.push({ label: op + " fitted", data: s.fitted, borderColor: c, borderDash: [6, 4], pointRadius: 0 });
      if (s.catalogue.length) {
        sets.push({ label: op + " catalogue link", data: s.catalogue, borderColor: c, borderDash: [2, 3],
                    pointRadius: 0 });
      }
    });
    return lines(canvas, sets, axes("bytes (nccl-tests' size S)", "busbw, GB/s", true, true));
  }

  function drawMemoryCompare(canvas, spec) {
    const kinds = Object.keys(spec.parts);
    const datasets = kinds.map((k, i) => ({ label: k, data: [spec.parts[k], null],
                                             backgroundColor: PALETTE[i % PALETTE.length], stack: "m" }));
    datasets.push({ label: "measured peak", data: [null, spec.measured], backgroundColor: color("--muted"), stack: "m" });
    return new Chart(canvas, {
      type: "bar", data: { labels: ["predicted peak", "measured peak"], datasets },
      options: { animation: false, maintainAspectRatio: false,
                 scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: spec.unit } } },
                 plugins: { legend: { labels: { color: color("--fg") } } } },
    });
  }

  // Labelled bars, one colour per set; stacked (a whole split into its parts) or side by side,
  // the value axis logarithmic where the bars span decades (data_loader, checkpoint job pages).
  function drawBars(canvas, spec) {
    const datasets = spec.sets.map((s, i) => ({ label: s.label, data: s.data, skipNull: true,
                                                backgroundColor: PALETTE[i % PALETTE.length], stack: spec.stacked ? "s" : undefined }));
    const value = axes("", spec.y, false, spec.log).y;
    return new Chart(canvas, {
      type: "bar", data: { labels: spec.labels, datasets },
      options: { animation: false, maintainAspectRatio: false,
                 scales: { x: { stacked: spec.stacked, ticks: { color: color("--muted") } },
                           y: Object.assign(value, { stacked: spec.stacked }) },
                 plugins: { legend: { labels: { color: color("--fg") } },
                            tooltip: { callbacks: { label: (c) => c.dataset.label + ": " + sig(c.raw) } } } },
    });
  }

  // Two runs on one chart (the compare page): one colour per dtype or transfer mode, run A
  // solid with round points, run B dashed with triangles.
  function drawCompareLines(canvas, spec) {
    const groups = [...new Set(spec.series.map((s) => s.group))];
    const sets = spec.series.map((s) => {
      const c = dtypeColor(s.group, groups.indexOf(s.group));
      return { label: s.label, data: s.points, borderColor: c, backgroundColor: c,
               borderDash: s.run === "B" ? [6, 4] : [], pointStyle: s.run === "B" ? "triangle" : "circle",
               pointRadius: 4 };
    });
    return lines(canvas, sets, axes(spec.x, spec.y, true, false));
  }

  function drawCompareBars(canvas, spec) {
    const datasets = Object.entries(spec.sets).map(([run, data], i) => ({
      label: "run " + run, data, backgroundColor: i === 0 ? color("--accent") : "#8250df" }));
    return new Chart(canvas, {
      type: "bar", data: { labels: spec.labels, datasets },
      options: { animation: false, maintainAspectRatio: false,
                 scales: { x: { ticks: { color: color("--muted") } },
                           y: { title: { display: true, text: spec.y },
                                ticks: { color: color("--muted"), callback: (v) => sig(v) } } },
                 plugins: { legend: { labels: { color: color("--fg") } } } },
    });
  }

  // Decode tokens/s of one replica against its batch (the Inference page), log-log: round
  // points memory-bound, squares compute-bound; vertical lines at the compute-bound batch
  // (dashed) and the most sequences that fit (dotted); the request's own batch as a large dot.
  function drawDecodeCurve(canvas, spec) {
    const ideal = spec.roofline || [];
    const ys = spec.points.map((p) => p.y).concat([spec.current.y], ideal.map((p) => p.y));
    const lo = Math.min(...ys), hi = Math.max(...ys);
    const accent = color("--accent");
    const sets = [{
      label: "tokens/s (one replica, kernel by kernel)", data: spec.points, borderColor: accent,
      backgroundColor: accent, order: 2,
      pointStyle: spec.points.map((p) => (p.bound === "compute" ? "rect" : "circle")), pointRadius: 4,
    }];
    // The roofline without overhead: the gap down to the curve is each step's overhead.
    if (ideal.length) sets.push({ label: "roofline (no overhead)", data: ideal, borderColor: color("--muted") || "#888",
                                  borderDash: [4, 3], pointRadius: 0, borderWidth: 1.5, order: 3 });
    const vertical = (x, label, dash, c) => ({ label, data: [{ x, y: lo }, { x, y: hi }], borderColor: c,
                                              borderDash: dash, pointRadius: 0, borderWidth: 2, order: 1 });
    if (spec.knee) sets.push(vertical(spec.knee, "compute-bound from batch " + amount(spec.knee), [6, 4],
                                      color("--warn") || "#d4a72c"));
    if (spec.most) sets.push(vertical(spec.most, "most that fit: " + amount(spec.most), [2, 3],
                                      color("--bad") || "#cf222e"));
    sets.push({ label: "this request: batch " + amount(spec.current.x), data: [spec.current], type: "scatter",
                pointRadius: 7, backgroundColor: color("--fg"), order: 0 });
    const scales = axes("batch (sequences decoded together, per replica)", "tokens/s", true, true);
    const xs = spec.points.map((p) => p.x).concat([spec.current.x, spec.knee || 1, spec.most || 1]);
    // A quarter of a step of room each side, so a mark at either end is not cut in half.
    Object.assign(scales.x, { min: Math.min(...xs) / 1.25, max: Math.max(...xs) * 1.25 });
    return lines(canvas, sets, scales);
  }

  const DRAW = {
    days_vs_gpus: drawDaysVsGpus, memory_stack: drawMemoryStack, flops_parts: drawFlopsParts,
    matmul_sizes: drawMatmulSizes, roofline: drawRoofline, transfer_sizes: drawTransferSizes,
    memory_compare: drawMemoryCompare, compare_lines: drawCompareLines, compare_bars: drawCompareBars,
    param_parts: drawParamParts, decode_curve: drawDecodeCurve, collective_busbw: drawCollectiveBusbw,
    bars: drawBars, predicted_measured: drawPredictedMeasured,
  };
  // For a page's own charts in their own file (static/fit.js, static/scale.js), which registers in `draw`.
  Object.assign(window.Tally, { color, axes, kindColors: KIND_COLORS, draw: DRAW });

  // The launch form shows the fieldsets of the chosen probe, and a control marked
  // data-shown-when="name=value" (the one-shape field, for the "one shape" sweep) only while that
  // control has that value; a hidden control is disabled too, so the form does not send it.
  function showProbeFields() {
    const probe = document.getElementById("probe");
    if (!probe) return;
    document.querySelectorAll("fieldset[data-probe]").forEach((set) => {
      set.hidden = !set.dataset.probe.split(" ").includes(probe.value);
    });
    document.querySelectorAll("[data-shown-when]").forEach((part) => {
      const [name, value] = part.dataset.shownWhen.split("=");
      const other = document.getElementById(name);
      const shown = other !== null && other.value === value;
      part.hidden = !shown;
      part.querySelectorAll("input, select").forEach((field) => { field.disabled = !shown; });
    });
  }
  document.addEventListener("change", (e) => {
    if (e.target.closest("#launch-form")) showProbeFields();
  });
  document.addEventListener("DOMContentLoaded", showProbeFields);

  // The model picker: the config box is shown (and sent) only for "a pasted config"; a field
  // that a picked model replaces (the time page's parameter count) only while none is picked.
  // A field hidden here is disabled too, so the form and its URL leave it out.
  function showModelFields() {
    const picker = document.querySelector("select[data-model-picker]");
    if (!picker) return;
    const toggle = (selector, shown) => document.querySelectorAll(selector).forEach((part) => {
      part.hidden = !shown;
      part.querySelectorAll("input, select, textarea").forEach((field) => { field.disabled = !shown; });
    });
    toggle("[data-model-config]", picker.value === "custom");
    toggle("[data-without-model]", picker.value === "");
  }
  document.addEventListener("change", (e) => {
    if (e.target.matches && e.target.matches("select[data-model-picker]")) showModelFields();
  });
  document.addEventListener("DOMContentLoaded", showModelFields);

  // A custom GPU's boxes (templates/partials/_custom_gpu.html): shown, and sent, only while the
  // GPU list says "custom"; disabled otherwise, so the form and its URL leave them out.
  function showCustomGpu() {
    const list = document.querySelector("select#gpu");
    document.querySelectorAll("[data-custom-gpu]").forEach((part) => {
      const shown = !!list && list.value === "custom";
      part.hidden = !shown;
      part.disabled = !shown;
    });
  }
  document.addEventListener("change", (e) => {
    if (e.target.matches && e.target.matches("select#gpu")) showCustomGpu();
  });
  document.addEventListener("DOMContentLoaded", showCustomGpu);

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
        // A refused setting inside a closed "More settings" group is shown, not hidden.
        const group = out.closest("details");
        if (message && group) group.open = true;
        const input = document.getElementById(out.dataset.errorFor);
        if (input) input.setAttribute("aria-invalid", message ? "true" : "false");
      });
    });
  }

  // The API token, typed (or opened as /?token=..., the link a server that generated its
  // token logs) once per origin: kept in this origin's localStorage, taken out of the
  // address bar and history, and filled into the launch form's token field.
  const TOKEN_KEY = "tally-api-token";

  function rememberToken() {
    const url = new URL(window.location.href);
    const given = url.searchParams.get("token");
    if (given) {
      try { localStorage.setItem(TOKEN_KEY, given); } catch (e) { /* storage off: typed each time */ }
      url.searchParams.delete("token");
      history.replaceState(history.state, "", url.pathname + url.search + url.hash);
    }
    const field = document.getElementById("token");
    let kept = null;
    try { kept = localStorage.getItem(TOKEN_KEY); } catch (e) { kept = null; }
    if (field && !field.value && kept) field.value = kept;
  }
  document.addEventListener("DOMContentLoaded", rememberToken);
  // A token field that arrives in a swapped result (the time page's probe button) is filled too.
  document.addEventListener("htmx:afterSettle", () => {
    let kept = null;
    try { kept = localStorage.getItem(TOKEN_KEY); } catch (e) { kept = null; }
    document.querySelectorAll("input[data-remembered-token]").forEach((f) => { if (!f.value && kept) f.value = kept; });
  });
  document.addEventListener("htmx:configRequest", (e) => {
    const token = e.detail.parameters && e.detail.parameters.token;
    if (token) {
      try { localStorage.setItem(TOKEN_KEY, token); } catch (err) { /* storage off */ }
    }
  });

  // A refused form keeps the last good answer, dimmed, with each message at its field and any
  // other at the top, instead of blanking the result (the server marks a refusal with
  // X-Tally-Refused). The next answer replaces it all.
  document.addEventListener("htmx:beforeSwap", (e) => {
    const target = e.detail.target;
    if (!target || target.id !== "result") return;
    const refused = e.detail.xhr && e.detail.xhr.getResponseHeader("X-Tally-Refused") === "1";
    if (!refused) {
      target.classList.remove("stale");
      return;
    }
    if (!target.querySelector("[data-answered]")) return;  // nothing to keep: show the refusal
    e.detail.shouldSwap = false;
    // Not swapped, so htmx would not move the address bar: the link still follows the inputs.
    const url = e.detail.xhr.getResponseHeader("HX-Replace-Url");
    if (url) history.replaceState(history.state, "", url);
    const incoming = document.createElement("template");
    incoming.innerHTML = e.detail.serverResponse;
    render(incoming.content);  // the messages beside their fields
    // What the refusal says above the answer (its message, a probe to run for a measured figure)
    // goes in one block at the top, replacing the last refusal's.
    target.querySelectorAll(".refusal-block").forEach((old) => old.remove());
    const block = document.createElement("div");
    block.className = "refusal-block";
    [...incoming.content.children].forEach((part) => {
      if (!part.matches("template, .stale-note, [data-answered]")) block.append(part);
    });
    if (block.children.length) {
      target.prepend(block);
      if (window.htmx) window.htmx.process(block);  // its forms and buttons post as swapped ones do
    }
    target.classList.add("stale");
  });

  document.addEventListener("DOMContentLoaded", () => render(document));
  // After any swap, outerHTML ones included (their target has left the page): render is idempotent.
  document.addEventListener("htmx:afterSettle", () => render(document));
})();
