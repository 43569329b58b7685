/* script/data.js: the page's data (the JSON in #qkv-data, schema: docs/explorer.md) and what
   is computed from it: the matrix of a view, layer and head, its summary, and colours. */

const DATA = JSON.parse(document.getElementById("qkv-data").textContent);
const SCALE = DATA.weight_scale;
const KIND = kindOf(DATA.model);
const $ = (id) => document.getElementById(id);

/** The heads a view's layer offers: each head, then the mean and the rollout where stored. */
function headChoices(v, layer) {
  const entry = v.layers[layer];
  const heads = entry.compact ? entry.compact.heads : entry.heads.length;
  const choices = [...Array(heads).keys()];
  if (heads > 1) choices.push("mean");
  if (entry.rollout || entry.compact) choices.push("rollout"); // compact: computed in the page
  return choices;
}

function headName(head) {
  if (head === "mean") return "mean over heads";
  if (head === "rollout") return "attention rollout";
  return "head " + head;
}

function parseHead(head) {
  return head === "mean" || head === "rollout" ? head : Number(head);
}

const meanCache = new Map();

/** The matrix as stored: integers, weight = value / SCALE.  "mean" rounds the mean of the
    stored heads; "rollout" is stored as computed by the library.  A compact view's matrix
    is computed (script/compact.js): null while its mean or rollout is on the way. */
function matrixOf(input, v, layer, head) {
  const entry = v.layers[layer];
  if (entry.compact) return compactMatrix(input, v, layer, head);
  if (head === "rollout") return entry.rollout;
  if (head !== "mean") return entry.heads[head];
  const key = input + "/" + v.id + "/" + layer;
  if (!meanCache.has(key)) {
    const heads = entry.heads;
    meanCache.set(key, heads[0].map((row, i) => row.map((_, j) => {
      let sum = 0;
      for (const m of heads) sum += m[i][j];
      return Math.round(sum / heads.length);
    })));
  }
  return meanCache.get(key);
}

function summaryOf(v, layer, head) {
  const entry = v.layers[layer];
  if (head === "mean") return entry.mean_summary;
  if (head === "rollout") return entry.rollout_summary;
  return entry.summaries[head];
}

// ---------------------------------------------------------------- colours

const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
function colour(t) {
  t = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(t));
  const f = t - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return [0, 1, 2].map((c) => Math.round(a[c] + (b[c] - a[c]) * f));
}
/** colour(t / 255) for t = 0..255 as RGBA bytes in one little-endian word, for ImageData. */
const PALETTE = new Uint32Array(256).map((_, t) => {
  const [r, g, b] = colour(t / 255);
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
});
const css = (rgb) => "rgb(" + rgb.join(",") + ")";
/** The largest entry of a matrix (rows of numbers), at least 1: a loop, since spreading a
    1,024-entry row into Math.max takes tens of ms over a long page's matrix. */
function maxOf(m) {
  let top = 1;
  for (const row of m) for (let j = 0; j < row.length; j++) if (row[j] > top) top = row[j];
  return top;
}
const themed = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
const short = (label, most = 14) => (label.length > most ? label.slice(0, most - 1) + "\u2026" : label);

/** The matrix as a canvas with one pixel per weight, coloured against its own maximum. */
function pixels(m) {
  const rows = m.length, cols = m[0].length, top = maxOf(m);
  const canvas = document.createElement("canvas");
  canvas.width = cols; canvas.height = rows;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(cols, rows), words = new Uint32Array(img.data.buffer);
  const step = 255 / top;
  for (let i = 0; i < rows; i++) {
    const row = m[i], base = i * cols;
    for (let j = 0; j < cols; j++) words[base + j] = PALETTE[Math.min(255, (row[j] * step + 0.5) | 0)];
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

function describe(s) {
  const parts = [`entropy ${s.entropy} bits`];
  if (s.diagonal !== null) parts.push(`diagonal ${s.diagonal}`, `previous ${s.previous}`);
  parts.push(`first ${s.first}`);
  return parts.join(" \u00b7 ");
}
