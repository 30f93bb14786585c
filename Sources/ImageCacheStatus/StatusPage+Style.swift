// StatusPage+Style: the status page's stylesheet, inlined in its <style> element and allowed by the
// Content-Security-Policy by its SHA-256 (StatusPage.contentSecurityPolicy): any change here changes the hash, which is
// computed from this very text, so there is nothing to keep in step by hand.
// Colours are CSS variables, one set for light and one for dark (prefers-color-scheme); the charts' series take
// the classes c0 ... c10 (an outcome: its index in the history document's `outcomes`), which set --c.
// Nothing is loaded: system fonts only, no images, no imports.

extension StatusPage {
    static let style = #"""

:root {
  color-scheme: light dark;
  --bg: #f4f5f7; --card: #ffffff; --text: #1c2230; --muted: #5b6576; --line: #dadfe6; --grid: #e8ebef;
  --accent: #2f6fd6; --bad: #c42b2b; --ok: #23864f; --warn: #b7791f;
  --c0: #2e9e5b; --c1: #17a2b8; --c2: #b59a1b; --c3: #e07b24; --c4: #8a5cc7;
  --c5: #3a78d4; --c6: #a0663a; --c7: #8a93a0; --c8: #4f6079; --c9: #d64545; --c10: #7a8f2e;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #11141a; --card: #1a1f28; --text: #e4e8ef; --muted: #9ba5b5; --line: #2d3441; --grid: #252b36;
    --accent: #6ea2ff; --bad: #ff6b6b; --ok: #4cc584; --warn: #e0a84a;
    --c0: #4cc584; --c1: #3cc3d6; --c2: #d8c04a; --c3: #f59a4a; --c4: #b08cf0;
    --c5: #6ea2ff; --c6: #c98d5f; --c7: #a3abb8; --c8: #7d90ad; --c9: #ff6b6b; --c10: #a8c05a;
  }
}
[hidden] { display: none !important; }
body { margin: 0; background: var(--bg); color: var(--text); }
header.top {
  display: flex; flex-wrap: wrap; align-items: baseline; gap: .35rem 1.1rem;
  padding: .75rem 1.25rem; background: var(--card); border-bottom: 1px solid var(--line);
  position: sticky; top: 0; z-index: 1;
}
header.top h1 { font-size: 1.2rem; margin: 0; letter-spacing: .01em; }
.version, .meta { color: var(--muted); font-variant-numeric: tabular-nums; }
.meta [data-stat] { color: var(--text); }
.live-state { font-weight: 600; }
.live-state::before {
  content: ""; display: inline-block; width: .6em; height: .6em; border-radius: 50%;
  background: var(--muted); margin-right: .4em;
}
html[data-live="live"] .live-state::before { background: var(--ok); }
html[data-live="paused"] .live-state::before { background: var(--warn); }
html[data-connection="lost"] .live-state::before { background: var(--bad); }
.connection { color: var(--bad); font-weight: 600; }
button {
  font: inherit; padding: .15rem .8rem; border-radius: 6px; cursor: pointer;
  border: 1px solid var(--line); background: var(--bg); color: var(--text);
}
button:hover { border-color: var(--accent); }
#script-errors {
  margin: 1rem 1.25rem 0; padding: .6rem .8rem; border: 1px solid var(--bad); border-radius: 6px;
  color: var(--bad); background: var(--card); white-space: pre-wrap;
}
main.grid {
  display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 440px), 1fr));
  gap: 1rem; padding: 1rem 1.25rem 2rem; max-width: 1680px; margin: 0 auto;
}
.card {
  background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: .85rem 1rem 1rem; min-width: 0;
}
.card.wide { grid-column: 1 / -1; }
.card h2 { font-size: 1rem; margin: 0 0 .15rem; }
.card h3 { font-size: .9rem; margin: 0 0 .3rem; color: var(--muted); font-weight: 600; }
.caption { color: var(--muted); margin: 0 0 .7rem; font-size: .84rem; }
.muted, .noscript { color: var(--muted); }
.noscript { font-style: italic; }
dl.figures {
  display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr));
  gap: .7rem 1.2rem; margin: 0 0 .6rem;
}
dl.figures dt { color: var(--muted); font-size: .8rem; }
dl.figures dd { margin: 0; font-size: 1.4rem; font-weight: 600; font-variant-numeric: tabular-nums; }
dl.figures.small { grid-template-columns: repeat(auto-fill, minmax(120px, 1fr)); gap: .4rem 1rem; }
dl.figures.small dd { font-size: 1rem; }
details { margin-top: .6rem; }
summary { cursor: pointer; color: var(--muted); font-size: .84rem; margin-bottom: .4rem; }
svg.chart { display: block; width: 100%; height: auto; }
svg text { fill: var(--muted); font-size: 11px; font-family: inherit; }
svg text.empty { font-size: 13px; font-style: italic; }
.grid-line { stroke: var(--grid); stroke-width: 1; }
.axis { stroke: var(--line); stroke-width: 1; }
.c0 { --c: var(--c0); } .c1 { --c: var(--c1); } .c2 { --c: var(--c2); } .c3 { --c: var(--c3); } .c4 { --c: var(--c4); }
.c5 { --c: var(--c5); } .c6 { --c: var(--c6); } .c7 { --c: var(--c7); } .c8 { --c: var(--c8); } .c9 { --c: var(--c9); }
.c10 { --c: var(--c10); }
path.line { fill: none; stroke: var(--c); stroke-width: 2; stroke-linejoin: round; stroke-linecap: round; }
circle.dot { fill: var(--c); }
path.area { fill: var(--c); fill-opacity: .85; stroke: var(--card); stroke-width: .5; }
.legend {
  list-style: none; display: flex; flex-wrap: wrap; gap: .25rem 1rem;
  padding: 0; margin: .5rem 0 0; font-size: .82rem; color: var(--muted);
}
.swatch {
  display: inline-block; width: .8em; height: .8em; border-radius: 2px;
  background: var(--c); margin-right: .35em; vertical-align: -.05em;
}
.gauges { display: grid; grid-template-columns: repeat(auto-fit, minmax(190px, 1fr)); gap: 1rem; }
svg.gauge { display: block; width: 100%; max-width: 200px; height: auto; margin: 0 auto .4rem; }
.gauge-track { fill: none; stroke: var(--grid); stroke-width: 12; }
.gauge-fill { fill: none; stroke: var(--c0); stroke-width: 12; }
.gauge-fill.high { stroke: var(--c3); }
.gauge-fill.full { stroke: var(--c9); }
svg text.gauge-value { fill: var(--text); font-size: 15px; font-weight: 600; }
svg text.gauge-note { font-size: 8px; }
.table-wrap { overflow: auto; max-height: 24rem; }
table { width: 100%; border-collapse: collapse; font-size: .85rem; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th {
  color: var(--muted); font-weight: 600; font-size: .74rem; text-transform: uppercase; letter-spacing: .04em;
  position: sticky; top: 0; background: var(--card);
}
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.url { word-break: break-all; font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .8rem; }
td.reason { min-width: 14rem; }
td.warn { color: var(--warn); font-weight: 600; }
tr.empty td { color: var(--muted); font-style: italic; text-align: center; }
td.bar-cell { width: 90px; vertical-align: middle; }
svg.bar { display: block; width: 80px; height: 8px; }
.bar-track { fill: var(--grid); }
.bar-fill { fill: var(--accent); }
.split { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 380px), 1fr)); gap: 1rem; }
@media (scripting: none) {
  svg.chart, svg.gauge { display: none; }
}
@media (max-width: 600px) {
  header.top, main.grid { padding-left: .6rem; padding-right: .6rem; }
  dl.figures dd { font-size: 1.15rem; }
}

"""#
}
