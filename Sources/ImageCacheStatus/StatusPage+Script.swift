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
//   figures   `figureValues` mirrors StatusPage.figures(for:) name for name; data-value is written as Swift prints
//             the number (`swiftNumber`), the text with the same rules as StatusPage.Format.
// Owns: its own state object (the last stats and history), confined to the page's single thread.
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
  const state = { stats: initial.stats, history: initial.history, paused: false, polling: false, timer: 0 };

  // MARK: Formats (the rules of StatusPage.Format)

  const groupDigits = (value) => {
    let digits = String(Math.abs(Math.trunc(value)));
    let out = "";
    while (digits.length > 3) {
      out = "," + digits.slice(-3) + out;
      digits = digits.slice(0, -3);
    }
    return (value < 0 ? "-" : "") + digits + out;
  };
  const tenths = (value) => {
    const count = Math.round(value * 10);
    return Math.trunc(count / 10) + "." + (count % 10);
  };
  const formatBytes = (value) => {
    if (value < 1024) return groupDigits(Math.round(value)) + " B";
    const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let scaled = value / 1024;
    let unit = 0;
    while (scaled >= 1024 && unit < units.length - 1) {
      scaled /= 1024;
      unit += 1;
    }
    return tenths(scaled) + " " + units[unit];
  };
  const formatPercent = (ratio) => tenths(ratio * 100) + "%";
  const formatDuration = (seconds) => {
    const whole = Math.floor(Math.max(0, seconds));
    const days = Math.floor(whole / 86400), hours = Math.floor(whole % 86400 / 3600);
    const minutes = Math.floor(whole % 3600 / 60), rest = whole % 60;
    if (days > 0) return days + "d " + hours + "h";
    if (hours > 0) return hours + "h " + minutes + "m";
    if (minutes > 0) return minutes + "m " + rest + "s";
    return rest + "s";
  };
  const formatUnit = (unit, value) => {
    switch (unit) {
      case "bytes": return formatBytes(value);
      case "ratio": return formatPercent(value);
      case "duration": return formatDuration(value);
      case "milliseconds": return groupDigits(value) + " ms";
      default: return groupDigits(value);
    }
  };
  const formatRate = (value) => {
    if (value >= 1e6) return Number((value / 1e6).toFixed(2)) + "M/s";
    if (value >= 1e3) return Number((value / 1e3).toFixed(2)) + "k/s";
    if (value > 0 && value < 10) return Number(value.toFixed(2)) + "/s";
    return Math.round(value) + "/s";
  };
  const two = (value) => (value < 10 ? "0" : "") + value;
  const clock = (time, seconds) => {
    const date = new Date(time * 1000);
    return two(date.getHours()) + ":" + two(date.getMinutes()) + (seconds ? ":" + two(date.getSeconds()) : "");
  };
  // A number as Swift's String(describing:) prints it: a Double always with a fraction or an exponent ("0.0",
  // "1e-05", "1e+16"), in its shortest round-trip digits (the same digits JavaScript picks).
  const swiftNumber = (value, isDouble) => {
    if (!isDouble) return String(value);
    if (Number.isNaN(value)) return "nan";
    if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
    const [mantissa, exponentText] = value.toExponential().split("e");
    const exponent = Number(exponentText);
    if (value !== 0 && (exponent < -4 || exponent >= 16)) {
      const magnitude = Math.abs(exponent);
      return mantissa + "e" + (exponent < 0 ? "-" : "+") + (magnitude < 10 ? "0" : "") + magnitude;
    }
    const text = String(value);
    return text.includes(".") ? text : text + ".0";
  };

  // MARK: Figures (the names of StatusPage.figures(for:))

  const sumValues = (object) => Object.values(object || {}).reduce((sum, value) => sum + value, 0);
  const sumOf = (object, names) => names.reduce((sum, name) => sum + ((object || {})[name] || 0), 0);

  const figureValues = (stats, history) => {
    const values = new Map();
    const int = (name, value) => values.set(name, { value, isDouble: false });
    const double = (name, value) => values.set(name, { value, isDouble: true });
    const requests = sumValues(stats.requests);
    const served = sumValues(stats.servedBytes);
    const fromCacheBytes = sumOf(stats.servedBytes, history.fromCache);
    double("uptimeSeconds", stats.uptimeSeconds);
    int("requests.total", requests);
    double("hitRatio", requests === 0 ? 0 : sumOf(stats.requests, history.fromCache) / requests);
    double("byteHitRatio", served === 0 ? 0 : fromCacheBytes / served);
    int("servedBytes.total", served);
    int("servedBytes.fromCache", fromCacheBytes);
    int("upstream.bytes", stats.upstream.bytes);
    int("upstream.transfers", sumValues(stats.upstream.transfers));
    int("upstream.inFlight", stats.upstream.inFlight);
    int("errors.total", sumValues(stats.errors));
    for (const outcome of history.outcomes) int("requests." + outcome, (stats.requests || {})[outcome] || 0);
    const fetches = stats.coalescing.waitersPerFetch.count;
    const waiters = Math.round(stats.coalescing.waitersPerFetch.sum);
    int("coalescing.fetches", fetches);
    int("coalescing.waiters", waiters);
    int("coalescing.saved", waiters - fetches);
    for (const name of ["memory", "disk"]) {
      const tier = stats[name];
      if (!tier) continue;
      int(name + ".bytes", tier.bytes);
      int(name + ".limitBytes", tier.limitBytes);
      int(name + ".entries", tier.entries);
      int(name + ".evictions", tier.evictions);
    }
    if (stats.transforms) {
      int("transforms.total", Object.values(stats.transforms.results).reduce((sum, results) => sum + sumValues(results), 0));
      const seconds = stats.transforms.seconds;
      if (seconds.count > 0) int("transforms.meanMilliseconds", Math.round(seconds.sum / seconds.count * 1000));
    }
    return values;
  };

  const updateFigures = () => {
    const values = figureValues(state.stats, state.history);
    for (const element of document.querySelectorAll("[data-stat]")) {
      const figure = values.get(element.dataset.stat);
      if (!figure) continue;
      element.dataset.value = swiftNumber(figure.value, figure.isDouble);
      element.textContent = formatUnit(element.dataset.unit, figure.value);
    }
  };

  // MARK: DOM and SVG building

  const svgElement = (name, attributes, text) => {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    if (text !== undefined) element.textContent = text;
    return element;
  };
  const cell = (content, className) => {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (content instanceof Node) td.append(content);
    else td.textContent = content;
    return td;
  };
  const timeElement = (time) => {
    const element = document.createElement("time");
    element.dateTime = new Date(time * 1000).toISOString();
    element.textContent = clock(time, true);
    return element;
  };
  const bar = (fraction) => {
    const svg = svgElement("svg", { class: "bar", viewBox: "0 0 100 8", preserveAspectRatio: "none", "aria-hidden": "true" });
    const width = Math.min(1, Math.max(0, fraction)) * 100;
    svg.append(svgElement("rect", { class: "bar-track", width: 100, height: 8 }),
      svgElement("rect", { class: "bar-fill", width: width.toFixed(1), height: 8 }));
    return svg;
  };
  const fillTable = (id, rows) => {
    const table = document.getElementById(id);
    if (!table) return;
    const body = table.tBodies[0];
    if (rows.length === 0) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = cell(table.dataset.empty || "None.");
      td.colSpan = table.tHead.rows[0].cells.length;
      tr.append(td);
      body.replaceChildren(tr);
      return;
    }
    body.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      tr.append(...cells);
      return tr;
    }));
  };

  const updateTables = () => {
    const stats = state.stats;
    fillTable("in-flight", (stats.inFlightFetches || []).map((fetch) => [
      cell(fetch.url, "url"), cell(fetch.kind), cell(groupDigits(fetch.waiters), "num"),
      cell(formatBytes(fetch.receivedBytes), "num"), cell(tenths(fetch.seconds) + " s", "num"),
    ]));
    const hosts = stats.topHosts || [];
    const most = Math.max(1, ...hosts.map((host) => host.transfers));
    fillTable("top-hosts", hosts.map((host) => [
      cell(host.host, "url"), cell(groupDigits(host.transfers), "num"), cell(formatBytes(host.bytes), "num"),
      cell(bar(host.transfers / most), "bar-cell"),
    ]));
    fillTable("recent-errors", (stats.recentErrors || []).map((error) => [
      cell(timeElement(error.time)), cell(error.kind), cell(error.status == null ? "–" : String(error.status), "num"),
      cell(error.reason, "reason"), cell(error.target, "url"),
    ]));
    if (stats.transforms) {
      const rows = [];
      for (const format of Object.keys(stats.transforms.results).sort()) {
        const results = stats.transforms.results[format];
        for (const result of Object.keys(results).sort()) {
          rows.push([cell(format), cell(result), cell(groupDigits(results[result]), "num")]);
        }
      }
      fillTable("transforms", rows);
    }
  };

  // MARK: Gauges

  // A half circle, centre (60, 62), radius 48: the track, then the arc up to `fraction` of it.
  const arc = (fraction) => {
    const angle = Math.PI * (1 - Math.min(1, Math.max(0, fraction)));
    const x = 60 + 48 * Math.cos(angle), y = 62 - 48 * Math.sin(angle);
    return "M 12 62 A 48 48 0 0 1 " + x.toFixed(2) + " " + y.toFixed(2);
  };
  const drawGauge = (id, tier) => {
    const svg = document.getElementById(id);
    if (!svg || !tier) return;
    const fraction = tier.limitBytes > 0 ? tier.bytes / tier.limitBytes : 0;
    const level = fraction >= 0.98 ? " full" : fraction >= 0.85 ? " high" : "";
    svg.replaceChildren(svgElement("path", { class: "gauge-track", d: arc(1) }));
    if (fraction > 0) svg.append(svgElement("path", { class: "gauge-fill" + level, d: arc(fraction) }));
    svg.append(
      svgElement("text", { class: "gauge-value", x: 60, y: 58, "text-anchor": "middle" },
        tier.limitBytes > 0 ? formatPercent(fraction) : "no limit"),
      svgElement("text", { class: "gauge-note", x: 60, y: 70, "text-anchor": "middle" }, "of " + formatBytes(tier.limitBytes)));
  };

  // MARK: Charts

  // Charts are drawn in CSS pixels (the viewBox is the element's width), so that their text keeps its size on a phone.
  const PAD = { left: 72, right: 14, top: 12, bottom: 26 };
  const niceCeil = (value) => {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  };
  // Ticks on the time axis at round local times: about five across the span.
  const timeTicks = (start, end, most) => {
    const steps = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
    const step = steps.find((candidate) => (end - start) / candidate <= most) || 86400;
    const east = -new Date(end * 1000).getTimezoneOffset() * 60;
    const ticks = [];
    for (let t = Math.ceil((start + east) / step) * step - east; t <= end; t += step) ticks.push(t);
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
        svgElement("text", { x: x(t), y: H - 8, "text-anchor": "middle" }, clock(t, axis.seconds)));
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
    ], { yMax: 1, format: (value) => Math.round(value * 100) + "%" });
    drawChart("chart-requests", list, history.outcomes.map((outcome, index) => ({
      className: "c" + (index % 10),
      values: list.map((point) => perSecond((point.requests || {})[outcome] || 0, point)),
    })), { stacked: true, minTop: 1, format: formatRate });
    drawChart("chart-bytes", list, [
      { className: "c0", values: list.map((point) => perSecond(sumOf(point.servedBytes, history.fromCache), point)) },
      { className: "c3", values: list.map((point) => perSecond(point.upstreamBytes, point)) },
    ], { minTop: 1024, binary: true, format: (value) => formatBytes(value).replace(/\.0 /, " ") + "/s" });
    drawChart("chart-transform-latency", list, [
      { className: "c5", values: list.map((point) => point.transformMeanMilliseconds ?? null) },
      { className: "c9", values: list.map((point) => point.transformP95Milliseconds ?? null) },
    ], { minTop: 10, format: (value) => groupDigits(Math.round(value)) + " ms" });
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

  const showLive = () => {
    if (refreshMs === 0) {
      root.dataset.live = "off";
      liveState.textContent = "static: live updates are off";
      return;
    }
    root.dataset.live = state.paused ? "paused" : "live";
    liveState.textContent = state.paused ? "paused" : "live, every " + tenths(refreshMs / 1000).replace(/\.0$/, "") + " s";
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
    drawGauge("gauge-memory", state.stats.memory);
    drawGauge("gauge-disk", state.stats.disk);
    drawCharts();
    lastRefresh.dateTime = new Date(state.history.now * 1000).toISOString();
    lastRefresh.textContent = clock(state.history.now, true);
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
      state.stats = update.stats;
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
