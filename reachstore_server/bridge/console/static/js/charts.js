// Plots drawn as inline SVG: stacked bars (counts per state over time) and lines
// (latency percentiles, retry rate). Each chart carries a text summary for screen readers
// and a legend; colours are paired with labels so nothing relies on colour alone.

const NS = "http://www.w3.org/2000/svg";
const W = 360;
const H = 150;
const PAD = { left: 44, right: 8, top: 10, bottom: 22 };

function svgEl(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function frame(label, summary) {
  const svg = svgEl("svg", {
    viewBox: `0 0 ${W} ${H}`,
    role: "img",
    "aria-label": `${label}. ${summary}`,
    class: "chart",
  });
  svg.append(svgEl("title", {}, label));
  svg.append(svgEl("desc", {}, summary));
  return svg;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

function axes(svg, maxY, format, labels) {
  const x0 = PAD.left;
  const y0 = H - PAD.bottom;
  svg.append(svgEl("line", { x1: x0, y1: PAD.top, x2: x0, y2: y0, class: "axis" }));
  svg.append(svgEl("line", { x1: x0, y1: y0, x2: W - PAD.right, y2: y0, class: "axis" }));
  for (const frac of [0, 0.5, 1]) {
    const y = y0 - frac * (y0 - PAD.top);
    svg.append(svgEl("line", { x1: x0, y1: y, x2: W - PAD.right, y2: y, class: "grid" }));
    svg.append(svgEl("text", { x: x0 - 4, y: y + 4, class: "tick", "text-anchor": "end" },
      format(maxY * frac)));
  }
  if (labels.length) {
    svg.append(svgEl("text", { x: x0, y: H - 6, class: "tick" }, labels[0]));
    svg.append(svgEl("text", { x: W - PAD.right, y: H - 6, class: "tick", "text-anchor": "end" },
      labels[labels.length - 1]));
  }
}

function xAt(i, n) {
  const span = W - PAD.left - PAD.right;
  return PAD.left + (n <= 1 ? span / 2 : (i + 0.5) * (span / n));
}

function yAt(value, maxY) {
  const y0 = H - PAD.bottom;
  return y0 - (value / maxY) * (y0 - PAD.top);
}

// series: [{name, cls}], rows: [{label, values: {name: number}}]
export function stackedBars(label, series, rows, summary) {
  const svg = frame(label, summary);
  const totals = rows.map((r) => series.reduce((sum, s) => sum + (r.values[s.name] || 0), 0));
  const maxY = Math.max(2, niceMax(Math.max(0, ...totals)));
  axes(svg, maxY, (v) => String(Math.round(v)), rows.map((r) => r.label));
  const span = W - PAD.left - PAD.right;
  const barW = Math.max(2, (span / Math.max(1, rows.length)) * 0.7);
  rows.forEach((row, i) => {
    let base = 0;
    for (const s of series) {
      const v = row.values[s.name] || 0;
      if (!v) continue;
      const top = yAt(base + v, maxY);
      const bottom = yAt(base, maxY);
      const rect = svgEl("rect", {
        x: xAt(i, rows.length) - barW / 2, y: top, width: barW, height: Math.max(1, bottom - top),
        class: `bar ${s.cls}`,
      });
      rect.append(svgEl("title", {}, `${row.label}: ${s.name} ${v}`));
      svg.append(rect);
      base += v;
    }
  });
  return svg;
}

// series: [{name, cls, values: [number | null]}]; null is "no data" and leaves a gap, so
// a bucket where nothing happened is never drawn as a zero.
export function lines(label, series, xLabels, format, summary) {
  const svg = frame(label, summary);
  const known = series.flatMap((s) => s.values).filter((v) => v !== null);
  const maxY = niceMax(Math.max(0, ...known));
  axes(svg, maxY, format, xLabels);
  const n = xLabels.length;
  for (const s of series) {
    let d = "";
    let drawing = false;
    s.values.forEach((v, i) => {
      if (v === null) {
        drawing = false;
        return;
      }
      d += `${drawing ? "L" : "M"}${xAt(i, n).toFixed(1)},${yAt(v, maxY).toFixed(1)} `;
      drawing = true;
    });
    if (d) svg.append(svgEl("path", { d: d.trim(), class: `line ${s.cls}` }));
    s.values.forEach((v, i) => {
      if (v === null) return;
      const dot = svgEl("circle", { cx: xAt(i, n), cy: yAt(v, maxY), r: 2.4, class: `dot ${s.cls}` });
      dot.append(svgEl("title", {}, `${xLabels[i]}: ${s.name} ${format(v)}`));
      svg.append(dot);
    });
  }
  return svg;
}

// One horizontal bar per item, value 0..1 (coverage).
export function ratioBars(label, items, summary) {
  const rowH = 22;
  const width = 760;
  const height = Math.max(40, items.length * rowH + 10);
  const svg = svgEl("svg", {
    viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${label}. ${summary}`,
    class: "chart ratio",
  });
  svg.append(svgEl("title", {}, label));
  svg.append(svgEl("desc", {}, summary));
  const x0 = 150;
  const span = width - x0 - 70;
  items.forEach((item, i) => {
    const y = 6 + i * rowH;
    svg.append(svgEl("text", { x: x0 - 6, y: y + 13, class: "label", "text-anchor": "end" },
      item.label.length > 22 ? `${item.label.slice(0, 21)}…` : item.label));
    svg.append(svgEl("rect", { x: x0, y, width: span, height: 16, class: "track" }));
    svg.append(svgEl("rect", {
      x: x0, y, width: Math.max(0, item.value) * span, height: 16,
      class: `bar ${item.value < 1 ? "bad" : "good"}`,
    }));
    svg.append(svgEl("text", { x: x0 + span + 6, y: y + 13, class: "label" }, item.text));
  });
  return svg;
}

export function legend(series) {
  const list = document.createElement("ul");
  list.className = "legend";
  for (const s of series) {
    const item = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = `swatch ${s.cls}`;
    swatch.setAttribute("aria-hidden", "true");
    item.append(swatch, document.createTextNode(s.name));
    list.append(item);
  }
  return list;
}
