"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tokens.length, COLORS = ["#e6194b","#3cb44b","#4363d8","#f58231","#911eb4","#42d4f4","#f032e6",
  "#9a6324","#469990","#800000","#808000","#000075","#bfef45","#fabed4","#dcbeff","#a9a9a9"];
function bytes(b64) { const s = atob(b64), a = new Uint8Array(s.length); for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i); return a; }
function u16(b64) { const b = bytes(b64); return new Uint16Array(b.buffer, 0, b.length / 2); }
function decode(S) { S.w = u16(S.weights); if (S.storage === "topk") S.i = u16(S.index); return S; }  // data.py _token_maps
for (const run of D.runs) {
  const A = decode(run.attention), R = run.analysis; A.t = bytes(A.thumbs); decode(R.rollout); if (R.flow) decode(R.flow);
}
function mapRow(S, m, q) {  // row q of stored map m over every token (top-k storage: the kept ones, the rest 0)
  const row = new Float32Array(T);
  if (S.storage === "full") { const o = (m * T + q) * T; for (let j = 0; j < T; j++) row[j] = S.w[o + j] / S.quant; }
  else { const o = (m * T + q) * S.k; for (let r = 0; r < S.k; r++) row[S.i[o + r]] += S.w[o + r] / S.quant; }
  return row;
}
function attnRow(run, layer, head, q) { return mapRow(run.attention, layer * run.attention.heads + head, q); }
// colour scales (ColorBrewer): t in [0, 1] -> [r, g, b]; every heat map names its scale in a legend beside it
const BLUES = [[247,251,255],[222,235,247],[198,219,239],[158,202,225],[107,174,214],[66,146,198],[33,113,181],[8,81,156],[8,48,107]];
const RDBU = [[178,24,43],[214,96,77],[244,165,130],[253,219,199],[247,247,247],[209,229,240],[146,197,222],[67,147,195],[33,102,172]];
const ORANGES = [[255,245,235],[254,230,206],[253,208,162],[253,174,107],[253,141,60],[241,105,19],[217,72,1],[166,54,3],[127,39,4]];
function ramp(stops, t) { t = Math.max(0, Math.min(1, t || 0)) * (stops.length - 1);
  const i = Math.min(Math.floor(t), stops.length - 2), f = t - i; return stops[i].map((c, j) => Math.round(c + f * (stops[i + 1][j] - c))); }
const blues = t => ramp(BLUES, t), rdbu = t => ramp(RDBU, t), oranges = t => ramp(ORANGES, 1 - t);  // oranges: dark = low
function css(rgb) { return `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`; }
function inkOn(rgb) { return 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 140 ? "#fff" : "#111"; }
function num(v) { return Math.abs(v) >= 1000 ? v.toFixed(0) : v.toFixed(4); }
function el(id) { return document.getElementById(id); }
function span(className, textContent) { return Object.assign(document.createElement("span"), {className, textContent}); }
function label(t) { return t.replace(/\s/g, "\u00b7") || "\u2205"; }
function short(t, n = 14) { t = label(t); return t.length > n ? t.slice(0, n - 1) + "\u2026" : t; }
function legend(id, scale, lo, hi, what, loText, hiText) {  // a bar from lo (left) to hi (right), both ends in numbers
  const bar = document.createElement("canvas"); bar.width = 180; bar.height = 12; const g = bar.getContext("2d");
  for (let x = 0; x < bar.width; x++) { g.fillStyle = css(scale(x / (bar.width - 1))); g.fillRect(x, 0, 1, bar.height); }
  el(id).replaceChildren(span("what", what), span("lo", loText ?? num(lo)), bar, span("hi", hiText ?? num(hi)));
}

// -- summary ---------------------------------------------------------------------------------------
const M = D.model, A0 = D.runs[0].attention, A0T = D.runs[0].terms;  // terms: DeBERTa's score parts
el("summary").textContent = `${M.class} (${M.arch}, ${M.layers} layers x ${M.heads} heads, hidden ${M.hidden}, ` +
  (A0T ? `disentangled attention (${A0T.names.join(" + ")}; the score-function swap does not apply)`
       : `score function ${M.score_fn}`) + (M.relative_bias ? ", plus a relative-position bias by offset, so the " +
  "score-function swap does not apply" : "") + `); ${T} tokens` + (D.truncated ? " (all the window holds; the rest was cut)" : "") +
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
  const tokens = run.tokens || D.tokens;  // a corrupted run's own tokens
  c.width = W; c.height = T * ROW + 10; const g = c.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height); g.font = "12px monospace"; g.textBaseline = "middle";
  for (let q = 0; q < T; q++) {
    g.fillStyle = q === focus ? "#000" : "#444";
    g.textAlign = "right"; g.fillText(label(tokens[q]).slice(0, 18), x0 - 6, 5 + q * ROW + ROW / 2);
    g.textAlign = "left"; g.fillText(label(tokens[q]).slice(0, 18), x1 + 6, 5 + q * ROW + ROW / 2);
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
const ON_RUN = [drawHeads, drawGrid];  // what the run selector redraws (the analysis and terms sections add theirs)
runSel.onchange = () => ON_RUN.forEach(draw => draw()); layerSel.onchange = drawHeads;

// -- model view ------------------------------------------------------------------------------------
const LUT = Array.from({length: 256}, (_, v) => blues(v / 255));
function drawGrid() {
  const grid = el("grid"), run = D.runs[+runSel.value], A = run.attention, S = A.thumb; grid.innerHTML = "";
  legend("grid-legend", blues, 0, 1, "attention (block means), each map from 0 to its own largest:", "0",
    `its largest (\u2264 ${num(Math.max(...A.thumb_max))})`);
  grid.style.gridTemplateColumns = `50px repeat(${M.heads}, 52px)`;
  grid.append(Object.assign(document.createElement("span"), {className: "lab"}));
  for (let h = 0; h < M.heads; h++) grid.append(Object.assign(document.createElement("span"), {className: "lab", textContent: `head ${h}`}));
  for (let l = 0; l < M.layers; l++) {
    grid.append(Object.assign(document.createElement("span"), {className: "lab", textContent: `layer ${l}`}));
    for (let h = 0; h < M.heads; h++) {
      const c = document.createElement("canvas"); c.width = S; c.height = S; c.title = `layer ${l}, head ${h}`;
      const g = c.getContext("2d"), img = g.createImageData(S, S), o = (l * M.heads + h) * S * S;
      for (let p = 0; p < S * S; p++) img.data.set([...LUT[A.t[o + p]], 255], p * 4);
      g.putImageData(img, 0, 0); c.onclick = () => zoom(l, h); grid.append(c);
    }
  }
}
function tokenMap(c, rows, what, readout) {  // rows[q][k] on tokens x tokens, a label every `step` tokens (never overlapping)
  const cell = Math.max(1, Math.floor(600 / T)), FONT = 10, step = Math.ceil((FONT + 2) / cell), g = c.getContext("2d");
  const name = t => (step > 1 ? `${t} ` : "") + short(D.tokens[t]);  // long inputs: the position too
  g.font = `${FONT}px monospace`; let LW = 0;
  for (let t = 0; t < T; t += step) LW = Math.max(LW, Math.ceil(g.measureText(name(t)).width) + 8);
  const TOP = LW, top = Math.max(1e-12, ...rows.map(row => Math.max(...row)));
  c.width = LW + cell * T; c.height = TOP + cell * T;  // resizing resets the context: font set again below
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
  for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) if (rows[q][k] > 0) {
    g.fillStyle = css(blues(rows[q][k] / top)); g.fillRect(LW + k * cell, TOP + q * cell, cell, cell); }
  g.font = `${FONT}px monospace`; g.fillStyle = "#333"; g.textBaseline = "middle"; let rowLabels = 0, colLabels = 0;
  for (let t = 0; t < T; t += step) {
    g.textAlign = "right"; g.fillText(name(t), LW - 4, TOP + t * cell + cell / 2); rowLabels++;
    g.save(); g.translate(LW + t * cell + cell / 2, TOP - 4); g.rotate(-Math.PI / 2);
    g.textAlign = "left"; g.fillText(name(t), 0, 0); g.restore(); colLabels++;
  }
  Object.assign(c.dataset, {tokens: T, step, cell, rowLabels, colLabels, left: LW, top: TOP});
  legend(`${c.id}-legend`, blues, 0, top, what, "0");
  c.onmousemove = e => { const r = c.getBoundingClientRect(), k = Math.floor((e.clientX - r.left - LW) / cell),
    q = Math.floor((e.clientY - r.top - TOP) / cell); if (q >= 0 && q < T && k >= 0 && k < T) readout(q, k, rows[q][k]); };
}
function zoom(l, h) {  // one head's whole map: queries on rows, keys on columns
  const run = D.runs[+runSel.value], rows = Array.from({length: T}, (_, q) => attnRow(run, l, h, q));
  tokenMap(el("zoom-canvas"), rows, "attention weight (query row to key column):", (q, k, v) =>
    el("zoom-readout").textContent = `${label(D.tokens[q])} -> ${label(D.tokens[k])}: ${v.toFixed(5)}`);
  el("zoom-title").textContent = `${run.label}: layer ${l}, head ${h} (rows: queries, columns: keys)`;
}

// -- heatmaps: rows are tokens, columns layers (or any rows and columns named) ------------------------
function heatmap(canvasId, readoutId, table, scale, lo, hi, what, describe,
                 {CW = 28, RH = 12, digits = -1, rows = null, cols = null, corner = "token \\ after", click = null} = {}) {
  // table[column][row]; by default rows are tokens, columns after the embeddings ("emb") and after each layer (L0, ...)
  const c = el(canvasId), nc = table.length, LW = 130, TOP = 18, emb = nc === M.layers + 1;
  const rowNames = rows ?? D.tokens.map(t => short(t, 18)), nr = rowNames.length;
  const colNames = cols ?? table.map((_, x) => emb && x === 0 ? "emb" : `L${emb ? x - 1 : x}`);
  c.width = LW + nc * CW; c.height = TOP + nr * RH;
  const g = c.getContext("2d"); g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height); g.font = "10px monospace";
  g.textBaseline = "middle"; g.fillStyle = "#333"; g.textAlign = "right"; g.fillText(corner, LW - 4, TOP / 2);
  g.textAlign = "center";
  for (let x = 0; x < nc; x++) g.fillText(colNames[x], LW + x * CW + CW / 2, TOP / 2);
  const at = v => (hi > lo ? (v - lo) / (hi - lo) : 0); let printed = 0;
  for (let t = 0; t < nr; t++) { g.fillStyle = "#333"; g.textAlign = "right"; g.fillText(rowNames[t], LW - 4, TOP + t * RH + RH / 2);
    g.textAlign = "center";
    for (let x = 0; x < nc; x++) { const rgb = scale(at(table[x][t])); g.fillStyle = css(rgb); g.fillRect(LW + x * CW, TOP + t * RH, CW - 1, RH - 1);
      if (digits < 0) continue; const s = table[x][t].toFixed(digits);
      if (RH >= 12 && g.measureText(s).width <= CW - 4) { g.fillStyle = inkOn(rgb); g.fillText(s, LW + x * CW + CW / 2, TOP + t * RH + RH / 2); printed++; } } }
  Object.assign(c.dataset, {left: LW, top: TOP, cw: CW, rh: RH, values: printed});
  legend(`${canvasId}-legend`, scale, lo, hi, what);
  const cellAt = e => { const r = c.getBoundingClientRect(), x = Math.floor((e.clientX - r.left - LW) / CW),
    t = Math.floor((e.clientY - r.top - TOP) / RH); return x >= 0 && x < nc && t >= 0 && t < nr ? [x, t] : null; };
  c.onmousemove = e => { const at = cellAt(e); if (at) el(readoutId).textContent = describe(at[0], at[1], table[at[0]][at[1]]); };
  c.onclick = e => { const at = cellAt(e); if (at && click) click(at[0], at[1]); };
  c.style.cursor = click ? "pointer" : "";
}
function maxOf(table) { return Math.max(...table.map(r => Math.max(...r))); }
function minOf(table) { return Math.min(...table.map(r => Math.min(...r))); }
function drawNorms() {
  const run = D.runs[+el("norm-run").value], table = run.norms;
  heatmap("norms", "norms-readout", table, blues, minOf(table), maxOf(table), "state norm |x|:",
    (x, t, v) => `${label(D.tokens[t])}, ${x === 0 ? "embeddings" : "after layer " + (x - 1)}: |x| = ${v.toFixed(3)}` +
      (x > 0 ? `; before the LayerNorms: |x + attn| = ${run.stream.attention_residual[x - 1][t].toFixed(3)}, |x + ffn| = ${run.stream.ffn_residual[x - 1][t].toFixed(3)}` : ""));
}
// the parts this model's embeddings have (D.embedding.parts), and the projection where there is one
const E = D.embedding, PART_NAMES = {word: "word", position: "position", token_type: "token type"};
el("embedding-note").textContent = E.note;
el("part-head").replaceChildren(...["token", ...E.parts.map(p => `|${PART_NAMES[p]}|`), ...(E.projected ? ["|projected|"] : [])]
  .map(h => Object.assign(document.createElement("th"), {textContent: h})));
for (const p of E.parts) el("part").add(new Option(PART_NAMES[p], p));
function drawParts() {
  const run = D.runs[+el("norm-run").value], part = el("part").value, name = PART_NAMES[part];
  const mapped = E.projected ? " (layers: W p)" : "";
  heatmap("parts", "parts-readout", run.part_cosines[part], rdbu, -1, 1, `cos(state, ${name} embedding${mapped}):`,
    (x, t, v) => `${label(D.tokens[t])}, ${x === 0 ? "embeddings" : "after layer " + (x - 1)}: cos(x, ${name} embedding${x > 0 && E.projected ? " mapped by W" : ""}) = ${v.toFixed(4)}`);
  const body = el("part-norms"); body.innerHTML = "";
  D.tokens.forEach((tok, t) => { const tr = body.insertRow(); tr.insertCell().textContent = label(tok);
    for (const p of E.parts) tr.insertCell().textContent = run.parts[p][t].toFixed(3);
    if (E.projected) tr.insertCell().textContent = run.projected_norms[t].toFixed(3); });
}
["norm-run"].forEach(id => D.runs.forEach((r, i) => el(id).add(new Option(r.label, i))));
el("norm-run").onchange = () => { drawNorms(); drawParts(); drawDecomposition(); }; el("part").onchange = drawParts;

// -- analysis: what ma.analysis computes from each run's capture (data.py `analysis`) -------------------
function drawEntropy() {  // head_entropy: each head's mean attention entropy over the queries, in nats; E[layer][head]
  const run = D.runs[+runSel.value], E = run.analysis.entropy, table = Array.from({length: M.heads}, (_, h) => E.map(row => row[h]));
  heatmap("entropy", "entropy-readout", table, blues, minOf(E), maxOf(E), "mean attention entropy (nats):",
    (h, l, v) => `${run.label}: layer ${l}, head ${h}: ${v.toFixed(4)} nats, as spread as ${Math.exp(v).toFixed(2)} keys alike ` +
      `(all ${T} alike: ln ${T} = ${Math.log(T).toFixed(4)})`,
    {CW: 34, RH: 16, digits: 2, rows: E.map((_, l) => `layer ${l}`), cols: table.map((_, h) => `${h}`), corner: "layer \\ head",
     click: (h, l) => { zoom(l, h); el("zoom-title").scrollIntoView(); }});
}
el("rollout-kind").add(new Option("attention rollout", "rollout"));
if (D.runs.every(r => r.analysis.flow)) el("rollout-kind").add(new Option("attention flow", "flow"));
el("rollout-kind").onchange = () => drawRollout(); ON_RUN.push(drawEntropy, drawRollout);
function drawRollout() {  // attention_rollout (or attention_flow): output tokens (rows) from input tokens (columns)
  const run = D.runs[+runSel.value], R = run.analysis, kind = R.flow ? el("rollout-kind").value : "rollout", S = R[kind];
  const rows = Array.from({length: T}, (_, q) => mapRow(S, 0, q));
  tokenMap(el("rollout"), rows, `${kind} (output token row, input token column):`, (q, k, v) => el("rollout-readout").textContent =
    `${run.label}, ${kind}: ${label(D.tokens[q])} after the last layer from input ${label(D.tokens[k])}: ${v.toFixed(5)}`);
  el("rollout").dataset.drawn = `${runSel.value}:${kind}`;
  el("rollout-storage").textContent = S.storage === "full" ? `Stored as uint16 (x ${S.quant}, rounded): every entry.`
    : `Stored as uint16: each output token's ${S.k} largest entries; the ones left out hold at most ${S.rest_max.toFixed(3)} of a row.`;
  el("flow-note").textContent = R.flow ? "" : R.flow_note;
}
let picked = 0;  // the token whose decomposition is shown: the first until another is clicked
el("decomposition-tokens").replaceChildren(...D.tokens.map((tok, t) => Object.assign(span("tok", label(tok)),
  {title: `token ${t}`, onclick: () => { picked = t; drawDecomposition(); }})));
function drawDecomposition() {  // residual_decomposition: each part's share <p, x> / |x|^2 of the picked token's last state x
  const run = D.runs[+el("norm-run").value], R = run.analysis.decomposition;
  el("decomposition-refused").textContent = R.refused ? `Not shown for this model (${run.label}): ${R.refused}.` : "";
  el("decomposition-shown").style.display = R.refused ? "none" : "";
  if (R.refused) return;
  [...el("decomposition-tokens").children].forEach((chip, t) => chip.classList.toggle("picked", t === picked));
  const shares = R.share.map(row => row[picked]), top = Math.max(1e-12, ...shares.map(Math.abs)), body = el("decomposition-rows");
  body.replaceChildren();
  R.parts.forEach((name, p) => {
    const tr = body.insertRow(), bar = document.createElement("div"), fill = document.createElement("div");
    const w = 50 * Math.abs(shares[p]) / top;
    fill.style.cssText = `left:${shares[p] < 0 ? 50 - w : 50}%;width:${w}%;background:${shares[p] < 0 ? "#d6604d" : "#4a7bd0"}`;
    bar.className = "share"; bar.append(fill);
    tr.insertCell().textContent = name; tr.insertCell().append(bar);
    tr.insertCell().textContent = shares[p].toFixed(4); tr.insertCell().textContent = R.norm[p][picked].toFixed(3);
  });
  const sum = shares.reduce((a, b) => a + b, 0);
  el("decomposition-sum").textContent = sum.toFixed(4);
  el("decomposition-title").textContent = `${run.label}: token ${picked} (${label(D.tokens[picked])}), |x| = ` +
    `${R.state_norm[picked].toFixed(3)}: the shares sum to ${sum.toFixed(4)} (the parts add up to x to within ` +
    `${R.sum_error.toExponential(1)} of |x|, every token)`;
  el("decomposition").dataset.drawn = `${el("norm-run").value}:${picked}`;
}

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
function drawLabels() {  // a token classifier's labels per token (data.py token_labels), the pair's tokens marked
  if (!D.runs[0].token_labels) { el("labels-section").style.display = "none"; return; }
  const box = el("labels"); box.innerHTML = "";
  for (const run of D.runs) { box.append(Object.assign(document.createElement("h3"), {textContent: run.label}));
    const {labels, probs} = run.token_labels, line = document.createElement("div");
    (run.tokens || D.tokens).forEach((tok, t) => {
      const other = 1 - probs[t][0], best = probs[t].indexOf(Math.max(...probs[t])), marked = t >= D.pair_from;
      const chip = Object.assign(document.createElement("span"), {textContent: label(tok) + " ",
        title: labels.map((name, k) => `${name}: ${probs[t][k].toFixed(4)}`).join(", ")});
      if (marked) { chip.style.background = `rgba(214, 39, 40, ${other.toFixed(3)})`;
        if (best !== 0) { chip.style.textDecoration = "underline"; chip.className = "marked"; } }
      line.append(chip); });
    box.append(line); }
}
function drawDiff() {
  if (!D.cosine) { el("diff-section").style.display = "none"; return; }
  heatmap("diff", "diff-readout", D.cosine, oranges, minOf(D.cosine), maxOf(D.cosine),
    `cos(${D.runs[0].label}, ${D.runs[1].label}), darker: less alike:`,
    (x, t, v) => `${label(D.tokens[t])}, ${x === 0 ? "embeddings" : "after layer " + (x - 1)}: cos(${D.runs[0].label}, ${D.runs[1].label}) = ${v.toFixed(5)}`,
    {CW: 46, RH: 16, digits: 3});
}
function drawPatching() {  // activation patching (patching.py): restored fractions, layers x positions and layers x heads
  const P = D.patching; if (!P) { el("patching-section").style.display = "none"; return; }
  el("patching-metric").textContent = `Metric: ${P.metric}; clean run ${P.clean.toFixed(4)}, corrupted run ` +
    `${P.corrupted.toFixed(4)}.`;
  const swap = t => D.tokens[t] === D.corrupted_tokens[t] ? label(D.tokens[t]) : `${label(D.tokens[t])}\u2192${label(D.corrupted_tokens[t])}`;
  const rows = D.tokens.map((_, t) => short(swap(t), 18)), heads = Array.from({length: M.heads}, (_, h) => `head ${h}`);
  for (const [key, canvas, names, corner, what] of [
      ["residual", "residual-patch", rows, "token \\ layer", (l, i) => `layers.${l}.output at ${i} ${swap(i)}`],
      ["heads", "heads-patch", heads, "head \\ layer", (l, h) => `layer ${l}, head ${h} (layers.${l}.attention.context)`]]) {
    const S = P[key]; el(`${key}-note`).textContent = S.note ? `This map is ${S.note}.` : "";
    if (!S.restored) { el(canvas).style.display = "none"; continue; }
    const m = Math.max(1, ...S.restored.map(r => Math.max(...r.map(Math.abs))));
    heatmap(canvas, `${canvas}-readout`, S.restored, t => ramp(RDBU, t), -m, m, "restored fraction:",
      (l, i, v) => `${what(l, i)}: restores ${v.toFixed(4)} of the clean metric`,
      {CW: 40, RH: 16, digits: 2, rows: names, cols: S.restored.map((_, l) => `L${l}`), corner});
  }
}
// -- score terms (DeBERTa's disentangled attention): c2c + c2p + p2c = the raw scores, before the mask -----
const TERM_COLORS = {c2c: "#4363d8", c2p: "#f58231", p2c: "#3cb44b"};
function drawTermTable() {  // each term's mean |value| per layer (over heads and the pairs the mask lets through)
  const S = D.runs[+runSel.value].terms, names = S.names, layer = +el("term-layer").value, body = el("terms-summary");
  el("terms-head").replaceChildren(...["layer", ...names.map(n => `mean |${n}|`), `share (${names.join(" / ")})`]
    .map(h => Object.assign(document.createElement("th"), {textContent: h})));
  body.innerHTML = "";
  for (let l = 0; l < M.layers; l++) {
    const means = names.map(n => S.mean_abs[n][l].reduce((a, b) => a + b, 0) / M.heads);
    const total = means.reduce((a, b) => a + b, 0) || 1, tr = body.insertRow();
    tr.insertCell().textContent = `layer ${l}`; tr.style.cursor = "pointer"; tr.onclick = () => setLayer(l);
    if (l === layer) tr.style.background = "#eef";
    means.forEach(v => { tr.insertCell().textContent = v.toPrecision(4); });
    const cell = tr.insertCell(), bar = document.createElement("div");
    bar.style.cssText = "display:flex;width:160px;height:0.9em";
    names.forEach((n, i) => bar.append(Object.assign(document.createElement("span"),
      {title: `${n}: ${(100 * means[i] / total).toFixed(1)}%`, style: `background:${TERM_COLORS[n]};width:${100 * means[i] / total}%`})));
    cell.append(bar, ` ${means.map(v => (100 * v / total).toFixed(0) + "%").join(" / ")}`);
  }
}
function termAt(S, name, m, q, k) { return S.m[name][(m * S.size + q) * S.size + k] / S.quant * S.largest[name][m]; }
function drawTerms() {  // the selected layer's and head's terms side by side, on one scale symmetric about 0
  const run = D.runs[+runSel.value], S = run.terms, layer = +el("term-layer").value, head = +el("term-head").value;
  const m = layer * M.heads + head, N = S.size, blocks = S.storage === "blocks", names = S.names, FONT = 10;
  const first = b => Math.floor(b * T / N), last = b => Math.ceil((b + 1) * T / N) - 1;  // a block's tokens
  const cell = Math.max(1, Math.floor(300 / N)), step = Math.ceil((FONT + 2) / cell), GAP = 16, c = el("terms");
  const name = b => (blocks || step > 1 ? `${first(b)} ` : "") + short(D.tokens[first(b)]);
  const g = c.getContext("2d"); g.font = `${FONT}px monospace`; let LW = 0;
  for (let b = 0; b < N; b += step) LW = Math.max(LW, Math.ceil(g.measureText(name(b)).width) + 8);
  const TOP = LW, W = cell * N, top = Math.max(1e-30, ...names.map(n => S.largest[n][m]));
  c.width = LW + names.length * (W + GAP); c.height = TOP + W + 18;
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height); g.font = `${FONT}px monospace`; g.textBaseline = "middle";
  names.forEach((n, p) => {
    const x0 = LW + p * (W + GAP);
    for (let q = 0; q < N; q++) for (let k = 0; k < N; k++) {
      g.fillStyle = css(rdbu((termAt(S, n, m, q, k) / top + 1) / 2)); g.fillRect(x0 + k * cell, TOP + q * cell, cell, cell); }
    g.fillStyle = "#333";
    for (let b = 0; b < N; b += step) {
      if (p === 0) { g.textAlign = "right"; g.fillText(name(b), LW - 4, TOP + b * cell + cell / 2); }
      g.save(); g.translate(x0 + b * cell + cell / 2, TOP - 4); g.rotate(-Math.PI / 2); g.textAlign = "left";
      g.fillText(name(b), 0, 0); g.restore();
    }
    g.font = `bold 12px monospace`; g.textAlign = "center"; g.fillText(n, x0 + W / 2, TOP + W + 10); g.font = `${FONT}px monospace`;
  });
  const means = names.map(n => S.mean_abs[n][layer][head]), total = means.reduce((a, b) => a + b, 0) || 1;
  el("terms-share").textContent = `${run.label}: layer ${layer}, head ${head} (rows: ${blocks ? "query blocks" : "queries"}, ` +
    `columns: ${blocks ? "key blocks" : "keys"}): ` + names.map((n, i) => `${n} ${(100 * means[i] / total).toFixed(1)}%`).join(", ") +
    ` of the sum of mean |term|` + (blocks ? `; ${N} x ${N} block means of the ${T} tokens` : "");
  legend("terms-legend", rdbu, -top, top, "score term (red: negative, blue: positive), all three on one scale:");
  Object.assign(c.dataset, {drawn: `${runSel.value}:${layer}:${head}`, size: N, cell, left: LW, top: TOP, panel: W + GAP});
  c.onmousemove = e => { const r = c.getBoundingClientRect(), x = e.clientX - r.left - LW, y = e.clientY - r.top - TOP;
    const k = Math.floor((x % (W + GAP)) / cell), q = Math.floor(y / cell);
    if (x < 0 || q < 0 || q >= N || k >= N) return;
    const v = names.map(n => termAt(S, n, m, q, k)), where = blocks
      ? `queries ${first(q)}-${last(q)} -> keys ${first(k)}-${last(k)} (block means)` : `${label(D.tokens[q])} -> ${label(D.tokens[k])}`;
    el("terms-readout").textContent = `${where}: ` + names.map((n, i) => `${n} ${v[i].toFixed(5)}`).join(" + ") +
      ` = ${v.reduce((a, b) => a + b, 0).toFixed(5)}`; };
}
function setLayer(l) { layerSel.value = l; if (HAS_TERMS) el("term-layer").value = l; drawHeads(); if (HAS_TERMS) { drawTermTable(); drawTerms(); } }
const HAS_TERMS = !!el("terms-section") && !!D.runs[0].terms;
if (HAS_TERMS) {
  for (const run of D.runs) { const S = run.terms; S.m = {};
    for (const n of S.names) { const b = bytes(S.maps[n]); S.m[n] = new Int16Array(b.buffer, 0, b.length / 2); } }
  const S0 = D.runs[0].terms, said = {c2c: "c2c (query content \u00b7 key content)",
    c2p: "c2p (query content \u00b7 the key's relative position i \u2212 j)", p2c: "p2c (key content \u00b7 the query's relative position i \u2212 j)"};
  el("terms-note").textContent = `Disentangled attention: each raw score (before the mask) is ${S0.names.map(n => said[n]).join(" + ")}, ` +
    `each divided by \u221a(D \u00b7 ${S0.names.length}) = \u221a(${S0.head_dim} \u00b7 ${S0.names.length}); ` +
    `the table: each term's mean |value| per layer (over heads and the pairs the mask lets through); click a row for its layer.`;
  for (let l = 0; l < M.layers; l++) el("term-layer").add(new Option(`layer ${l}`, l));
  for (let h = 0; h < M.heads; h++) el("term-head").add(new Option(`head ${h}`, h));
  el("term-layer").onchange = () => setLayer(+el("term-layer").value); el("term-head").onchange = drawTerms;
  layerSel.onchange = () => setLayer(+layerSel.value);
  ON_RUN.push(drawTermTable, drawTerms);
}
drawHeads(); drawGrid(); zoom(0, 0); drawEntropy(); drawRollout(); drawNorms(); drawParts(); drawDecomposition(); drawProbs(); drawLabels();
drawDiff(); drawPatching(); if (HAS_TERMS) { drawTermTable(); drawTerms(); }
document.body.dataset.ready = "1";
