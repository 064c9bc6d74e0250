"""The HTML page of `ma.explore`: plain JavaScript and canvas, the data embedded as JSON, nothing
fetched (a Content-Security-Policy forbids every request)."""

from __future__ import annotations

import html
import json

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.note { color: #666; font-size: 0.9em; } .controls { margin: 0.5em 0; }
.controls label { margin-right: 0.8em; } .swatch { display: inline-block; width: 0.9em; height: 0.9em; }
#grid { display: grid; gap: 3px; } #grid canvas { width: 48px; height: 48px; cursor: pointer; border: 1px solid #ccc; }
#grid .lab { font-size: 10px; color: #666; align-self: center; } canvas { image-rendering: pixelated; }
.readout { font-family: monospace; min-height: 1.3em; } .bar { height: 1.1em; background: #4a7bd0; }
table { border-collapse: collapse; } td, th { padding: 1px 8px; text-align: right; font-size: 12px; }
"""

_SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tokens.length, COLORS = ["#e6194b","#3cb44b","#4363d8","#f58231","#911eb4","#42d4f4","#f032e6",
  "#9a6324","#469990","#800000","#808000","#000075","#bfef45","#fabed4","#dcbeff","#a9a9a9"];
function bytes(b64) { const s = atob(b64), a = new Uint8Array(s.length); for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i); return a; }
function u16(b64) { const b = bytes(b64); return new Uint16Array(b.buffer, 0, b.length / 2); }
for (const run of D.runs) {
  const A = run.attention; A.w = u16(A.weights); A.t = bytes(A.thumbs); if (A.storage === "topk") A.i = u16(A.index);
}
function attnRow(run, layer, head, q) {  // the query's weights over every key (top-k storage: the kept keys)
  const A = run.attention, m = layer * A.heads + head, row = new Float32Array(T);
  if (A.storage === "full") { const o = (m * T + q) * T; for (let j = 0; j < T; j++) row[j] = A.w[o + j] / A.quant; }
  else { const o = (m * T + q) * A.k; for (let r = 0; r < A.k; r++) row[A.i[o + r]] += A.w[o + r] / A.quant; }
  return row;
}
function heat(v) { v = Math.max(0, Math.min(1, v)); const c = Math.round(255 * (1 - v)); return `rgb(${c},${c},255)`; }
function diverge(v) { v = Math.max(-1, Math.min(1, v)); const c = Math.round(255 * (1 - Math.abs(v)));
  return v >= 0 ? `rgb(${c},${c},255)` : `rgb(255,${c},${c})`; }
function el(id) { return document.getElementById(id); }
function label(t) { return t.replace(/\s/g, "\u00b7") || "\u2205"; }

// -- summary ---------------------------------------------------------------------------------------
const M = D.model, A0 = D.runs[0].attention;
el("summary").textContent = `${M.class} (${M.arch}, ${M.layers} layers x ${M.heads} heads, hidden ${M.hidden}, ` +
  `score function ${M.score_fn}); ${T} tokens` + (D.truncated ? `, ${D.truncated} token(s) cut by the window` : "") +
  (D.runs.length > 1 ? `; two runs: ${D.runs.map(r => r.label).join(" vs ")}` : "");
el("storage").textContent = A0.storage === "full"
  ? `Attention: every weight of every head, stored as uint16 (p x ${A0.quant}, rounded; error <= ${(0.5 / A0.quant).toExponential(1)}).`
  : `Attention: each query's ${A0.k} strongest keys per head (uint16, p x ${A0.quant}); the keys left out hold at most ` +
    `${D.runs.map(r => r.attention.rest_max.toFixed(3)).join(" / ")} of a query's weight. Small maps are block means.`;

// -- head view -------------------------------------------------------------------------------------
const runSel = el("run"), layerSel = el("layer"), heads = new Set([0]);
D.runs.forEach((r, i) => runSel.add(new Option(r.label, i)));
if (D.runs.length < 2) runSel.parentElement.style.display = "none";
for (let l = 0; l < M.layers; l++) layerSel.add(new Option(`layer ${l}`, l));
for (let h = 0; h < M.heads; h++) {
  const lab = document.createElement("label"), box = document.createElement("input");
  box.type = "checkbox"; box.checked = heads.has(h); box.dataset.head = h;
  box.onchange = () => { box.checked ? heads.add(h) : heads.delete(h); drawHeads(); };
  lab.append(box, Object.assign(document.createElement("span"), {className: "swatch", style: `background:${COLORS[h % COLORS.length]}`}), ` ${h}`);
  el("heads").append(lab);
}
let focus = -1;
function drawHeads() {
  const c = el("head-canvas"), ROW = 16, W = 560, x0 = 150, x1 = W - 150, run = D.runs[+runSel.value], layer = +layerSel.value;
  c.width = W; c.height = T * ROW + 10; const g = c.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height); g.font = "12px monospace"; g.textBaseline = "middle";
  for (let q = 0; q < T; q++) {
    g.fillStyle = q === focus ? "#000" : "#444";
    g.textAlign = "right"; g.fillText(label(D.tokens[q]).slice(0, 18), x0 - 6, 5 + q * ROW + ROW / 2);
    g.textAlign = "left"; g.fillText(label(D.tokens[q]).slice(0, 18), x1 + 6, 5 + q * ROW + ROW / 2);
  }
  g.lineWidth = 2;
  for (const h of heads) {
    g.strokeStyle = COLORS[h % COLORS.length];
    for (let q = 0; q < T; q++) {
      if (focus >= 0 && q !== focus) continue;
      const row = attnRow(run, layer, h, q);
      for (let k = 0; k < T; k++) {
        if (row[k] < 0.01) continue;
        g.globalAlpha = Math.min(1, row[k] * (focus >= 0 ? 1 : 0.8));
        g.beginPath(); g.moveTo(x0, 5 + q * ROW + ROW / 2); g.lineTo(x1, 5 + k * ROW + ROW / 2); g.stroke();
      }
    }
  }
  g.globalAlpha = 1;
  c.dataset.drawn = `${runSel.value}:${layer}:${[...heads].join(",")}:${focus}`;
}
el("head-canvas").onmousemove = e => {
  const r = e.target.getBoundingClientRect(), q = Math.floor((e.clientY - r.top - 5) / 16);
  const f = (e.clientX - r.left) < 150 && q >= 0 && q < T ? q : -1; if (f !== focus) { focus = f; drawHeads(); }
};
runSel.onchange = () => { drawHeads(); drawGrid(); }; layerSel.onchange = drawHeads;

// -- model view ------------------------------------------------------------------------------------
function drawGrid() {
  const grid = el("grid"), run = D.runs[+runSel.value], A = run.attention, S = A.thumb; grid.innerHTML = "";
  grid.style.gridTemplateColumns = `50px repeat(${M.heads}, 52px)`;
  grid.append(Object.assign(document.createElement("span"), {className: "lab"}));
  for (let h = 0; h < M.heads; h++) grid.append(Object.assign(document.createElement("span"), {className: "lab", textContent: `head ${h}`}));
  for (let l = 0; l < M.layers; l++) {
    grid.append(Object.assign(document.createElement("span"), {className: "lab", textContent: `layer ${l}`}));
    for (let h = 0; h < M.heads; h++) {
      const c = document.createElement("canvas"); c.width = S; c.height = S; c.title = `layer ${l}, head ${h}`;
      const g = c.getContext("2d"), img = g.createImageData(S, S), o = (l * M.heads + h) * S * S;
      for (let p = 0; p < S * S; p++) { const v = 255 - A.t[o + p]; img.data.set([v, v, 255, 255], p * 4); }
      g.putImageData(img, 0, 0); c.onclick = () => zoom(l, h); grid.append(c);
    }
  }
}
function zoom(l, h) {
  const c = el("zoom-canvas"), run = D.runs[+runSel.value], cell = Math.max(1, Math.floor(512 / T));
  c.width = c.height = cell * T; const g = c.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
  for (let q = 0; q < T; q++) { const row = attnRow(run, l, h, q);
    for (let k = 0; k < T; k++) if (row[k] > 0) { g.fillStyle = heat(row[k]); g.fillRect(k * cell, q * cell, cell, cell); } }
  el("zoom-title").textContent = `${run.label}: layer ${l}, head ${h} (rows: queries, columns: keys)`;
  c.onmousemove = e => { const r = c.getBoundingClientRect(), k = Math.floor((e.clientX - r.left) / cell), q = Math.floor((e.clientY - r.top) / cell);
    if (q >= 0 && q < T && k >= 0 && k < T) el("zoom-readout").textContent =
      `${label(D.tokens[q])} -> ${label(D.tokens[k])}: ${attnRow(run, l, h, q)[k].toFixed(5)}`; };
}

// -- heatmaps: rows are tokens, columns layers -----------------------------------------------------
function heatmap(canvasId, readoutId, table, colour, describe) {
  const c = el(canvasId), cols = table.length, CW = 28, RH = 12, LW = 130; c.width = LW + cols * CW; c.height = T * RH + 16;
  const g = c.getContext("2d"); g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height); g.font = "10px monospace";
  g.textBaseline = "middle"; g.fillStyle = "#444";
  for (let x = 0; x < cols; x++) g.fillText(x === 0 && table.length === M.layers + 1 ? "emb" : String(table.length === M.layers + 1 ? x - 1 : x), LW + x * CW + 4, 7);
  for (let t = 0; t < T; t++) { g.fillStyle = "#444"; g.textAlign = "right"; g.fillText(label(D.tokens[t]).slice(0, 18), LW - 4, 16 + t * RH + RH / 2); g.textAlign = "left";
    for (let x = 0; x < cols; x++) { g.fillStyle = colour(table[x][t]); g.fillRect(LW + x * CW, 16 + t * RH, CW - 1, RH - 1); } }
  c.onmousemove = e => { const r = c.getBoundingClientRect(), x = Math.floor((e.clientX - r.left - LW) / CW), t = Math.floor((e.clientY - r.top - 16) / RH);
    if (x >= 0 && x < cols && t >= 0 && t < T) el(readoutId).textContent = describe(x, t, table[x][t]); };
}
function maxOf(table) { return Math.max(...table.map(r => Math.max(...r))); }
function drawNorms() {
  const run = D.runs[+el("norm-run").value], table = run.norms, top = maxOf(table);
  heatmap("norms", "norms-readout", table, v => heat(v / top),
    (x, t, v) => `${label(D.tokens[t])}, ${x === 0 ? "embeddings" : "after layer " + (x - 1)}: |x| = ${v.toFixed(3)}` +
      (x > 0 ? `; before the LayerNorms: |x + attn| = ${run.stream.attention_residual[x - 1][t].toFixed(3)}, |x + ffn| = ${run.stream.ffn_residual[x - 1][t].toFixed(3)}` : ""));
}
function drawParts() {
  const run = D.runs[+el("norm-run").value], part = el("part").value;
  heatmap("parts", "parts-readout", run.part_cosines[part], diverge,
    (x, t, v) => `${label(D.tokens[t])}, ${x === 0 ? "embeddings" : "after layer " + (x - 1)}: cos(x, ${part} embedding) = ${v.toFixed(4)}`);
  const body = el("part-norms"); body.innerHTML = "";
  D.tokens.forEach((tok, t) => { const tr = body.insertRow(); tr.insertCell().textContent = label(tok);
    for (const p of ["word", "position", "token_type"]) tr.insertCell().textContent = run.parts[p][t].toFixed(3); });
}
["norm-run"].forEach(id => D.runs.forEach((r, i) => el(id).add(new Option(r.label, i))));
el("norm-run").onchange = () => { drawNorms(); drawParts(); }; el("part").onchange = drawParts;

// -- AlignScore heads and the two-run diff --------------------------------------------------------
function drawProbs() {
  if (!D.runs[0].heads) { el("probs-section").style.display = "none"; return; }
  const box = el("probs"); box.innerHTML = "";
  for (const run of D.runs) { box.append(Object.assign(document.createElement("h3"), {textContent: run.label}));
    for (const [name, p] of Object.entries(run.heads)) {
      const row = document.createElement("div"); row.textContent = `${name}: ${p.toFixed(4)}`;
      if (name !== "reg") row.append(Object.assign(document.createElement("div"), {className: "bar", style: `width:${Math.round(300 * p)}px`}));
      box.append(row); } }
}
function drawDiff() {
  if (!D.cosine) { el("diff-section").style.display = "none"; return; }
  heatmap("diff", "diff-readout", D.cosine, diverge,
    (x, t, v) => `${label(D.tokens[t])}, ${x === 0 ? "embeddings" : "after layer " + (x - 1)}: cos(${D.runs[0].label}, ${D.runs[1].label}) = ${v.toFixed(5)}`);
}
drawHeads(); drawGrid(); zoom(0, 0); drawNorms(); drawParts(); drawProbs(); drawDiff();
document.body.dataset.ready = "1";
"""

_BODY = """
<h1>minialign explore</h1>
<p id="summary"></p>
<p class="note">Input: <b>{text}</b>{pair}</p>
<p class="note" id="storage"></p>
<h2>Head view</h2>
<div class="controls"><label>run <select id="run"></select></label><label><select id="layer"></select></label>
<span id="heads">heads: </span></div>
<p class="note">Left: queries, right: keys; a line's opacity is the attention weight (below 0.01 not drawn).
Hover a query to see only its lines.</p>
<canvas id="head-canvas"></canvas>
<h2>Model view</h2>
<p class="note">Every layer x head, each map scaled to its own largest weight; click one to enlarge it.</p>
<div id="grid"></div>
<h3 id="zoom-title"></h3><div class="readout" id="zoom-readout"></div><canvas id="zoom-canvas"></canvas>
<h2>Residual stream</h2>
<div class="controls"><label>run <select id="norm-run"></select></label></div>
<p class="note">Norm of each token's state after the embeddings and after each layer (darker: larger).</p>
<div class="readout" id="norms-readout"></div><canvas id="norms"></canvas>
<h2>Embedding decomposition</h2>
<p class="note">Norms of each token's three embedding parts, and the cosine between every layer's state and
one part (blue: along it, red: against it).</p>
<table><thead><tr><th>token</th><th>|word|</th><th>|position|</th><th>|token type|</th></tr></thead>
<tbody id="part-norms"></tbody></table>
<div class="controls"><label>part <select id="part"><option>word</option><option>position</option>
<option>token_type</option></select></label></div>
<div class="readout" id="parts-readout"></div><canvas id="parts"></canvas>
<section id="probs-section"><h2>AlignScore heads</h2><div id="probs"></div></section>
<section id="diff-section"><h2>Two runs: the same token's states</h2>
<p class="note">Cosine between the two runs' states of each token, after the embeddings and each layer.</p>
<div class="readout" id="diff-readout"></div><canvas id="diff"></canvas></section>
"""


def render(data: dict) -> str:
    """The page for `data` (explore.Exploration.data)."""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=True).replace("</", "<\\/")
    pair = f" / <b>{html.escape(data['pair'])}</b>" if data.get("pair") else ""
    body = _BODY.replace("{text}", html.escape(data["text"])).replace("{pair}", pair)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
            "<title>minialign explore</title>\n<style>" + _STYLE + "</style></head>\n<body>" + body
            + "<script type=\"application/json\" id=\"data\">" + payload + "</script>\n<script>" + _SCRIPT
            + "</script>\n</body></html>\n")
