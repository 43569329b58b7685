/* script/compact.js: long inputs.  A compact view's layer stores each head's q and k in half
   precision (base64) instead of its T x T weights; a head's weights are computed here when
   it is shown, softmax(q k^T / sqrt(d)) in float64 (causal for an LM), rounded to the page's
   integers, and the last few are kept.  The model view draws each head's stored thumbnail
   (block means against the head's maximum). */

let HALF = null; // float16 bit pattern -> its value, built on first use

function halfTable() {
  HALF = HALF || new Float32Array(65536).map((_, h) => {
    const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 31, fraction = h & 1023;
    if (exponent === 0) return sign * fraction * 2 ** -24;
    if (exponent === 31) return fraction ? NaN : sign * Infinity;
    return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
  });
  return HALF;
}

function bytesOf(b64) {
  const text = atob(b64), bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

function halvesOf(b64) {
  const codes = new Uint16Array(bytesOf(b64).buffer), out = new Float32Array(codes.length);
  const table = halfTable();
  for (let i = 0; i < codes.length; i++) out[i] = table[codes[i]];
  return out;
}

const decoded = new Map(); // "input/view/layer" -> {q, k}
const computed = new Map(); // "input/view/layer/head" -> matrix, the last COMPUTED_KEPT
const COMPUTED_KEPT = 6;

/** A compact layer's head as the page's matrix: rows of rounded integers (Int32Array). */
function compactMatrix(input, v, layer, head) {
  const key = `${input}/${v.id}/${layer}/${head}`;
  if (computed.has(key)) return computed.get(key);
  const c = v.layers[layer].compact, where = `${input}/${v.id}/${layer}`;
  if (!decoded.has(where)) decoded.set(where, { q: halvesOf(c.q), k: halvesOf(c.k) });
  const { q, k } = decoded.get(where);
  const T = c.length, d = c.dim, kv = Math.floor(head / (c.heads / c.kv_heads));
  const qBase = head * T * d, kBase = kv * T * d, scores = new Float64Array(T), rows = [];
  for (let i = 0; i < T; i++) {
    const keys = c.causal ? i + 1 : T, qi = qBase + i * d;
    let top = -Infinity;
    for (let j = 0; j < keys; j++) {
      let dot = 0;
      const kj = kBase + j * d;
      for (let e = 0; e < d; e++) dot += q[qi + e] * k[kj + e];
      scores[j] = dot * c.scale;
      if (scores[j] > top) top = scores[j];
    }
    let total = 0;
    for (let j = 0; j < keys; j++) { scores[j] = Math.exp(scores[j] - top); total += scores[j]; }
    const row = new Int32Array(T);
    for (let j = 0; j < keys; j++) row[j] = Math.round((scores[j] / total) * SCALE);
    rows.push(row);
  }
  computed.set(key, rows);
  if (computed.size > COMPUTED_KEPT) computed.delete(computed.keys().next().value);
  return rows;
}

const thumbBytes = new Map(); // a layer's thumbnails, decoded once

/** A head's stored thumbnail as a canvas, one pixel per block. */
function thumbCanvas(c, head) {
  if (!thumbBytes.has(c)) thumbBytes.set(c, bytesOf(c.thumb));
  const size = c.thumb_size, bytes = thumbBytes.get(c), canvas = document.createElement("canvas");
  canvas.width = size; canvas.height = size;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(size, size);
  for (let p = 0; p < size * size; p++) {
    const rgb = colour(bytes[head * size * size + p] / 255);
    img.data[4 * p] = rgb[0]; img.data[4 * p + 1] = rgb[1]; img.data[4 * p + 2] = rgb[2]; img.data[4 * p + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}
