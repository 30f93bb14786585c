// StatusPage+Script: the status page's script, inlined in its <script> element and allowed by the
// Content-Security-Policy by its SHA-256 (StatusPage.contentSecurityPolicy, computed from this very text).
//
// What it does
//   start     installs the error capture (window error, unhandledrejection, securitypolicyviolation: a line in
//             <pre id="script-errors">, unhidden), reads <script id="initial-data"> ({stats, history}) and
//             <html data-refresh-ms>, draws the charts and gauges at once.
//   poll      every refresh period (none when 0, or while paused): GET "stats" and "stats/history?since=<t of its
//             last sample>", relative URLs (the page is served at /_imagecached/ and /_imagecached/status), no-store,
//             same-origin credentials; appends the new samples (at most `capacity` kept), redraws everything, then
//             increments <html data-refreshes>. A failed poll shows "disconnected: <reason>" and is not a refresh.
//   text      formats nothing: every figure, table cell, gauge label and the time come as text in the stats
//             document's `display` (StatusView, formatted in Swift by StatusFormat, as the first render was), and
//             are put in place as they are. The charts are drawn from the history's raw numbers; their axis labels
//             are the only text made here (nothing in Swift draws a chart).
// Owns: its own state object (the last display and history), confined to the page's single thread.
// Data from the daemon (URLs, hosts, reasons) comes from hostile clients and origins: every DOM node is built with
// createElement / createElementNS / textContent / setAttribute; no innerHTML, eval or Function.

extension StatusPage {
    static let script = #"""

"use strict";
(() => {
  // Error capture first, so that nothing the rest does can fail unseen.
  const errorBox = document.getElementById("script-errors");
  const reportError = (line) => {
    errorBox.textContent += line + "\n";
    errorBox.hidden = false;
  };
  window.addEventListener("error", (event) => {
    const where = event.filename ? " (" + event.filename + ":" + event.lineno + ":" + event.colno + ")" : "";
    reportError("error: " + (event.message || String(event.error)) + where);
  });
  window.addEventListener("unhandledrejection", (event) => {
    const reason = event.reason;
    reportError("unhandled rejection: " + (reason && reason.stack ? reason.stack : String(reason)));
  });
  window.addEventListener("securitypolicyviolation", (event) => {
    reportError("blocked by the Content-Security-Policy: " + event.violatedDirective + " (" + (event.blockedURI || "inline") + ")");
  });

  const SVG_NS = "http://www.w3.org/2000/svg";
  const root = document.documentElement;
  const refreshMs = Math.max(0, Number(root.dataset.refreshMs) || 0);
  const initial = JSON.parse(document.getElementById("initial-data").textContent);
  const state = { display: initial.stats.display, history: initial.history, paused: false, polling: false, timer: 0 };

  // MARK: Text (the daemon's, as it is)

  // Each figure's text and exact value, by the name in its data-stat.
  const updateFigures = () => {
    const figures = state.display.figures;
    for (const element of document.querySelectorAll("[data-stat]")) {
      const figure = figures[element.dataset.stat];
      if (!figure) continue;
      element.dataset.value = figure.value;
      element.textContent = figure.text;
    }
  };

  // MARK: DOM and SVG building

  const svgElement = (name, attributes, text) => {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    if (text !== undefined) element.textContent = text;
    return element;
  };
  // A bar `width` percent full (the daemon's number, as the first render wrote it).
  const bar = (width) => {
    const svg = svgElement("svg", { class: "bar", viewBox: "0 0 100 8", preserveAspectRatio: "none", "aria-hidden": "true" });
    svg.append(svgElement("rect", { class: "bar-track", width: 100, height: 8 }),
      svgElement("rect", { class: "bar-fill", width: width, height: 8 }));
    return svg;
  };
  // A table cell from the daemon's: its text, a <time> (`datetime`), or a bar (`bar`); StatusPage.cell in HTML.
  const cell = (spec) => {
    const td = document.createElement("td");
    if (spec.class) td.className = spec.class;
    if (spec.bar !== undefined) {
      td.append(bar(spec.bar));
    } else if (spec.datetime !== undefined) {
      const time = document.createElement("time");
      time.dateTime = spec.datetime;
      time.textContent = spec.text;
      td.append(time);
    } else {
      td.textContent = spec.text;
    }
    return td;
  };
  const fillTable = (id, rows) => {
    const table = document.getElementById(id);
    if (!table) return;
    const body = table.tBodies[0];
    if (rows.length === 0) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = cell({ text: table.dataset.empty || "None." });
      td.colSpan = table.tHead.rows[0].cells.length;
      tr.append(td);
      body.replaceChildren(tr);
      return;
    }
    body.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      tr.append(...cells.map(cell));
      return tr;
    }));
  };
  const updateTables = () => {
    for (const [id, rows] of Object.entries(state.display.tables)) fillTable(id, rows);
  };

  // MARK: Gauges

  // A half circle, centre (60, 62), radius 48: the track, then the arc up to `fraction` of it.
  const arc = (fraction) => {
    const angle = Math.PI * (1 - Math.min(1, Math.max(0, fraction)));
    const x = 60 + 48 * Math.cos(angle), y = 62 - 48 * Math.sin(angle);
    return "M 12 62 A 48 48 0 0 1 " + x.toFixed(2) + " " + y.toFixed(2);
  };
  // A tier's gauge from the daemon's: the arc from `fraction`, its `level` class, its text and note as they are.
  const drawGauge = (id, gauge) => {
    const svg = document.getElementById(id);
    if (!svg) return;
    svg.replaceChildren(svgElement("path", { class: "gauge-track", d: arc(1) }));
    if (gauge.fraction > 0) svg.append(svgElement("path", { class: "gauge-fill" + (gauge.level ? " " + gauge.level : ""), d: arc(gauge.fraction) }));
    svg.append(
      svgElement("text", { class: "gauge-value", x: 60, y: 58, "text-anchor": "middle" }, gauge.text),
      svgElement("text", { class: "gauge-note", x: 60, y: 70, "text-anchor": "middle" }, gauge.note));
  };
  const drawGauges = () => {
    for (const [id, gauge] of Object.entries(state.display.gauges)) drawGauge(id, gauge);
  };

  // MARK: Charts

  // Axis labels: the charts' own text (the daemon draws no chart). Times in UTC, as every time the daemon writes.
  const two = (value) => (value < 10 ? "0" : "") + value;
  const axisClock = (time, seconds) => {
    const date = new Date(time * 1000);
    return two(date.getUTCHours()) + ":" + two(date.getUTCMinutes()) + (seconds ? ":" + two(date.getUTCSeconds()) : "");
  };
  const axisPercent = (value) => Math.round(value * 100) + "%";
  const axisRate = (value) => {
    if (value >= 1e6) return Number((value / 1e6).toFixed(2)) + "M/s";
    if (value >= 1e3) return Number((value / 1e3).toFixed(2)) + "k/s";
    if (value > 0 && value < 10) return Number(value.toFixed(2)) + "/s";
    return Math.round(value) + "/s";
  };
  // Ticks are multiples of a power of 1024 (`binary`): 512 B/s, 1.5 KiB/s, 2 MiB/s.
  const axisBytesPerSecond = (value) => {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return Number(value.toFixed(1)) + " " + units[unit] + "/s";
  };
  const axisMilliseconds = (value) => Math.round(value) + " ms";

  // Charts are drawn in CSS pixels (the viewBox is the element's width), so that their text keeps its size on a phone.
  const PAD = { left: 72, right: 14, top: 12, bottom: 26 };
  const niceCeil = (value) => {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  };
  // Ticks on the time axis at round times (UTC): about five across the span.
  const timeTicks = (start, end, most) => {
    const steps = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
    const step = steps.find((candidate) => (end - start) / candidate <= most) || 86400;
    const ticks = [];
    for (let t = Math.ceil(start / step) * step; t <= end; t += step) ticks.push(t);
    return { ticks, seconds: step < 60 };
  };
  // The samples to draw: the recorded ones inside the window, a break (a point with no values) wherever samples are
  // missing (the daemon was down, or the page paused across a restart), then the interval in progress as the
  // rightmost point once it is half an interval long (a rate over a few milliseconds would spike the scale).
  const points = () => {
    const history = state.history;
    const start = history.now - history.capacity * history.interval;
    const list = [];
    let previous = null;
    for (const sample of history.samples) {
      if (sample.t <= start) continue;
      if (previous !== null && sample.t - previous > 1.5 * history.interval) list.push({ t: previous + history.interval, seconds: 0 });
      list.push(sample);
      previous = sample.t;
    }
    if (history.current && history.current.seconds >= history.interval / 2) list.push(history.current);
    return list;
  };
  const perSecond = (value, point) => (point.seconds > 0 ? value / point.seconds : null);
  const sumValues = (object) => Object.values(object || {}).reduce((sum, value) => sum + value, 0);
  const sumOf = (object, names) => names.reduce((sum, name) => sum + ((object || {})[name] || 0), 0);

  // series: [{ className, values: [number | null per point] }]; options: { stacked, yMax, minTop, binary, format }.
  const drawChart = (id, list, series, options) => {
    const svg = document.getElementById(id);
    if (!svg) return;
    const W = Math.max(280, Math.round(svg.clientWidth || 640));
    const H = Math.round(Math.min(230, Math.max(170, W * 0.4)));
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.replaceChildren();
    const history = state.history;
    const end = history.now, start = end - history.capacity * history.interval;
    const plotWidth = W - PAD.left - PAD.right, plotHeight = H - PAD.top - PAD.bottom;
    const x = (t) => (PAD.left + (t - start) / (end - start) * plotWidth).toFixed(1);
    // Grid lines at round values (1, 2, 2.5 or 5 times a power of ten; of 1024s for bytes), three to five of them.
    let top = options.yMax, step = top / 4;
    if (top === undefined) {
      let most = 0;
      list.forEach((_, index) => {
        if (options.stacked) most = Math.max(most, series.reduce((sum, s) => sum + (s.values[index] || 0), 0));
        else for (const s of series) if (s.values[index] != null) most = Math.max(most, s.values[index]);
      });
      const highest = Math.max(most, options.minTop || 0);
      const unit = options.binary && highest >= 1024 ? Math.pow(1024, Math.floor(Math.log(highest) / Math.log(1024))) : 1;
      step = niceCeil(highest / unit / 4) * unit;
      top = Math.max(step, Math.ceil(highest / step - 1e-9) * step);
    }
    const y = (value) => (PAD.top + plotHeight - value / top * plotHeight).toFixed(1);
    for (let index = 0; index * step <= top * (1 + 1e-9); index += 1) {
      const value = index * step;
      svg.append(svgElement("line", { class: "grid-line", x1: PAD.left, x2: W - PAD.right, y1: y(value), y2: y(value) }));
      if (list.length > 0) svg.append(svgElement("text", { x: PAD.left - 6, y: Number(y(value)) + 4, "text-anchor": "end" }, options.format(value)));
    }
    const axis = timeTicks(start, end, Math.max(2, Math.min(6, Math.floor(plotWidth / 80))));
    for (const t of axis.ticks) {
      svg.append(
        svgElement("line", { class: "axis", x1: x(t), x2: x(t), y1: PAD.top + plotHeight, y2: PAD.top + plotHeight + 4 }),
        svgElement("text", { x: x(t), y: H - 8, "text-anchor": "middle" }, axisClock(t, axis.seconds)));
    }
    svg.append(svgElement("line", { class: "axis", x1: PAD.left, x2: W - PAD.right, y1: PAD.top + plotHeight, y2: PAD.top + plotHeight }));
    if (list.length === 0) {
      // One sentence a line, so that it fits a phone.
      const sentences = (svg.dataset.empty || "No samples yet.").split(/(?<=\.) /);
      sentences.forEach((sentence, index) => {
        const lineY = PAD.top + plotHeight / 2 + (index - (sentences.length - 1) / 2) * 16;
        svg.append(svgElement("text", { class: "empty", x: PAD.left + plotWidth / 2, y: lineY, "text-anchor": "middle" }, sentence));
      });
      return;
    }
    if (options.stacked) {
      const base = list.map(() => 0);
      for (const s of series) {
        const upper = base.map((value, index) => value + (s.values[index] || 0));
        if (upper.every((value, index) => value === base[index])) continue;
        let d = "";
        list.forEach((point, index) => { d += (index ? " L " : "M ") + x(point.t) + " " + y(upper[index]); });
        for (let index = list.length - 1; index >= 0; index -= 1) d += " L " + x(list[index].t) + " " + y(base[index]);
        svg.append(svgElement("path", { class: "area " + s.className, d: d + " Z" }));
        upper.forEach((value, index) => { base[index] = value; });
      }
      return;
    }
    for (const s of series) {
      let d = "", run = [];
      const flush = () => {
        if (run.length === 1) svg.append(svgElement("circle", { class: "dot " + s.className, cx: run[0][0], cy: run[0][1], r: 2.5 }));
        run = [];
      };
      list.forEach((point, index) => {
        const value = s.values[index];
        if (value == null || !Number.isFinite(value)) { flush(); return; }
        const at = [x(point.t), y(Math.min(value, top))];
        d += (run.length ? " L " : " M ") + at[0] + " " + at[1];
        run.push(at);
      });
      flush();
      if (d) svg.append(svgElement("path", { class: "line " + s.className, d: d.trim() }));
    }
  };

  const drawCharts = () => {
    const history = state.history;
    const list = points();
    const ratio = (counts, names) => {
      const all = sumValues(counts);
      return all === 0 ? null : sumOf(counts, names) / all;
    };
    drawChart("chart-hit-ratio", list, [
      { className: "c0", values: list.map((point) => ratio(point.requests, history.fromCache)) },
      { className: "c5", values: list.map((point) => ratio(point.servedBytes, history.fromCache)) },
    ], { yMax: 1, format: axisPercent });
    drawChart("chart-requests", list, history.outcomes.map((outcome, index) => ({
      className: "c" + (index % 11),
      values: list.map((point) => perSecond((point.requests || {})[outcome] || 0, point)),
    })), { stacked: true, minTop: 1, format: axisRate });
    drawChart("chart-bytes", list, [
      { className: "c0", values: list.map((point) => perSecond(sumOf(point.servedBytes, history.fromCache), point)) },
      { className: "c3", values: list.map((point) => perSecond(point.upstreamBytes, point)) },
    ], { minTop: 1024, binary: true, format: axisBytesPerSecond });
    drawChart("chart-transform-latency", list, [
      { className: "c5", values: list.map((point) => point.transformMeanMilliseconds ?? null) },
      { className: "c9", values: list.map((point) => point.transformP95Milliseconds ?? null) },
    ], { minTop: 10, format: axisMilliseconds });
  };

  // Redrawn at the new width when the window is resized (once per frame).
  let resizeFrame = 0;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(drawCharts);
  });

  // MARK: Live state

  const liveState = document.getElementById("live-state");
  const toggle = document.getElementById("live-toggle");
  const connection = document.getElementById("connection");
  const lastRefresh = document.getElementById("last-refresh");

  // The live state's text is the daemon's (data-live-text), or "paused".
  const showLive = () => {
    if (refreshMs === 0) {
      root.dataset.live = "off";
      return;
    }
    root.dataset.live = state.paused ? "paused" : "live";
    liveState.textContent = state.paused ? "paused" : liveState.dataset.liveText;
    toggle.textContent = state.paused ? "Resume" : "Pause";
    toggle.setAttribute("aria-pressed", String(state.paused));
  };
  const showConnected = () => {
    delete root.dataset.connection;
    connection.hidden = true;
    connection.textContent = "";
  };
  const showDisconnected = (reason) => {
    root.dataset.connection = "lost";
    connection.textContent = "disconnected: " + reason;
    connection.hidden = false;
  };

  const render = () => {
    updateFigures();
    updateTables();
    drawGauges();
    drawCharts();
    const time = state.display.time;
    if (time.datetime !== undefined) lastRefresh.dateTime = time.datetime;
    else lastRefresh.removeAttribute("datetime");
    lastRefresh.textContent = time.text;
  };

  // MARK: Polling

  const fetchJSON = async (path) => {
    // Relative to the page, without credentials a user may have typed into its URL (admin:TOKEN@ before the host):
    // fetch refuses a URL that carries them; the browser sends the ones it was given with the request anyway.
    const url = new URL(path, location.href);
    url.username = "";
    url.password = "";
    const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error(path.split("?")[0] + " answered HTTP " + response.status);
    return response.json();
  };

  const poll = async () => {
    const known = state.history.samples;
    const since = known.length > 0 ? known[known.length - 1].t : null;
    const [stats, history] = await Promise.all([
      fetchJSON("stats"),
      fetchJSON(since === null ? "stats/history" : "stats/history?since=" + encodeURIComponent(String(since))),
    ]);
    // The daemon's clock went back (or it restarted with a clock behind): start again from its whole history.
    if (since !== null && history.now < since) return { stats, history: await fetchJSON("stats/history") };
    const merged = known.concat(history.samples.filter((sample) => since === null || sample.t > since));
    history.samples = merged.slice(Math.max(0, merged.length - history.capacity));
    return { stats, history };
  };

  const schedule = () => {
    clearTimeout(state.timer);
    if (refreshMs > 0 && !state.paused) state.timer = setTimeout(tick, refreshMs);
  };

  const tick = async () => {
    if (state.polling) return;
    state.polling = true;
    try {
      let update;
      try {
        update = await poll();
      } catch (error) {
        showDisconnected(error && error.message ? error.message : String(error));
        return;
      }
      if (state.paused) return;
      state.display = update.stats.display;
      state.history = update.history;
      showConnected();
      render();
      root.dataset.refreshes = String((Number(root.dataset.refreshes) || 0) + 1);
    } finally {
      state.polling = false;
      schedule();
    }
  };

  toggle.addEventListener("click", () => {
    state.paused = !state.paused;
    showLive();
    if (state.paused) clearTimeout(state.timer);
    else tick();
  });

  showLive();
  render();
  if (refreshMs > 0) {
    toggle.hidden = false;
    schedule();
  }
})();

"""#
}
