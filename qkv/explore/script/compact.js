/* script/compact.js: long inputs.  A compact view's layer stores each head's q and k in half
   precision (base64) instead of its T x T weights; a head's weights are computed here when
   it is shown, softmax(q k^T / sqrt(d)) in float64 over the keys each query sees (causal for
   an LM, within the layer's sliding window where it has one), rounded to the page's
   integers, and the last few are kept.  The mean over heads and the rollout take every head
   of one layer (the rollout: of every layer up to it), so they are computed in slices
   between frames, the page saying how far it has come, and kept.  The model view draws each
   head's stored thumbnail (block means against the head's maximum). */

let HALF = null; // float16 bit pattern -> its value, built on first use

function halfTable() {
  HALF = HALF || new Float64Array(65536).map((_, h) => {
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
  const codes = new Uint16Array(bytesOf(b64).buffer), out = new Float64Array(codes.length);
  const table = halfTable();
  for (let i = 0; i < codes.length; i++) out[i] = table[codes[i]];
  return out;
}

const decoded = new Map(); // "input/view/layer" -> {q, k}, Float64Arrays

function vectorsOf(input, v, layer) {
  const where = `${input}/${v.id}/${layer}`, c = v.layers[layer].compact;
  if (!decoded.has(where)) decoded.set(where, { q: halvesOf(c.q), k: halvesOf(c.k) });
  return decoded.get(where);
}

/** The keys query i sees, [first, end): causal, and within the window where there is one. */
function keyRange(c, i) {
  const end = c.causal ? i + 1 : c.length;
  return [c.window ? Math.max(0, i - c.window + 1) : 0, end];
}

/** Adds share x one head's weights into out (T x T, row-major, float64). */
function addHeadWeights(c, vectors, head, out, share) {
  const T = c.length, d = c.dim, kv = Math.floor(head / (c.heads / c.kv_heads));
  const { q, k } = vectors, scores = new Float64Array(T), qi = new Float64Array(d);
  const tail = d - (d % 4);
  for (let i = 0; i < T; i++) {
    const [first, end] = keyRange(c, i), qBase = (head * T + i) * d;
    for (let e = 0; e < d; e++) qi[e] = q[qBase + e];
    let top = -Infinity;
    for (let j = first; j < end; j++) {
      const kj = (kv * T + j) * d;
      let a = 0, b = 0, x = 0, y = 0; // four running sums: the loop runs about twice as fast
      for (let e = 0; e < tail; e += 4) {
        a += qi[e] * k[kj + e]; b += qi[e + 1] * k[kj + e + 1];
        x += qi[e + 2] * k[kj + e + 2]; y += qi[e + 3] * k[kj + e + 3];
      }
      for (let e = tail; e < d; e++) a += qi[e] * k[kj + e];
      const score = (a + b + x + y) * c.scale;
      scores[j] = score;
      if (score > top) top = score;
    }
    let total = 0;
    for (let j = first; j < end; j++) { scores[j] = Math.exp(scores[j] - top); total += scores[j]; }
    const base = i * T, factor = share / total;
    for (let j = first; j < end; j++) out[base + j] += scores[j] * factor;
  }
  return out;
}

/** Float64 weights (T x T) as the page's matrix: rows (Int32Array views) of rounded integers. */
function roundedRows(weights, T) {
  const flat = new Int32Array(T * T), rows = [];
  for (let p = 0; p < T * T; p++) flat[p] = Math.round(weights[p] * SCALE);
  for (let i = 0; i < T; i++) rows.push(flat.subarray(i * T, (i + 1) * T));
  return rows;
}

// ---------------------------------------------------------------- the mean and the rollout

const results = new Map(); // "input/view/layer/mean" or ".../rollout" -> float64 T x T
const jobs = new Map(); // the same keys -> {steps: a generator, progress: what it has done}

/** The mean over a layer's heads, one head a step; keeps its result. */
function* meanSteps(input, v, layer) {
  const key = `${input}/${v.id}/${layer}/mean`;
  if (results.has(key)) return results.get(key);
  const c = v.layers[layer].compact, vectors = vectorsOf(input, v, layer);
  const out = new Float64Array(c.length * c.length);
  for (let h = 0; h < c.heads; h++) {
    addHeadWeights(c, vectors, h, out, 1 / c.heads);
    yield `layer ${layer}: head ${h + 1} of ${c.heads} computed`;
  }
  results.set(key, out);
  return out;
}

/** The rollout (qkv.explore.attention_rollout): R_l = A_hat_l R_(l-1), A_hat = (A + I) / 2
    with rows renormalised, A the layer's mean over heads; keeps each layer's result. */
function* rolloutSteps(input, v, layer) {
  const key = `${input}/${v.id}/${layer}/rollout`;
  if (results.has(key)) return results.get(key);
  const previous = layer > 0 ? yield* rolloutSteps(input, v, layer - 1) : null;
  const mean = yield* meanSteps(input, v, layer);
  const out = rolloutLayer(v.layers[layer].compact, mean, previous);
  results.set(key, out);
  yield `the rollout of layer ${layer} computed`;
  return out;
}

function rolloutLayer(c, mean, previous) {
  const T = c.length, mixed = new Float64Array(T * T);
  for (let i = 0; i < T; i++) {
    let total = 0;
    for (let j = 0; j < T; j++) {
      const value = 0.5 * mean[i * T + j] + (i === j ? 0.5 : 0);
      mixed[i * T + j] = value; total += value;
    }
    for (let j = 0; j < T; j++) mixed[i * T + j] /= Math.max(total, 1e-12);
  }
  if (!previous) return mixed;
  const out = new Float64Array(T * T); // mixed @ previous, skipping the zeros a mask leaves
  for (let i = 0; i < T; i++) {
    const [first, end] = keyRange(c, i), base = i * T;
    for (let m = first; m < end; m++) {
      const a = mixed[base + m], row = m * T, last = c.causal ? m + 1 : T;
      for (let j = 0; j < last; j++) out[base + j] += a * previous[row + j];
    }
  }
  return out;
}

/** The result for key, or null while its steps run (started here, in slices of ~40 ms). */
function later(key, makeSteps) {
  if (results.has(key)) return results.get(key);
  if (!jobs.has(key)) jobs.set(key, { steps: makeSteps(), progress: "starting" });
  if (!working) { working = true; setTimeout(work, 0); }
  return null;
}

let working = false; // whether work() is scheduled

function work() {
  if (!jobs.size) { working = false; return; }
  const [key, job] = jobs.entries().next().value, started = performance.now();
  while (performance.now() - started < 40) {
    const step = job.steps.next();
    if (step.done) { results.set(key, step.value); jobs.delete(key); render(); break; }
    job.progress = step.value;
  }
  const note = $("pending-note");
  if (note && jobs.has(key)) note.textContent = pendingText(key);
  setTimeout(work, 0);
}

function pendingText(key) {
  const what = key.endsWith("/mean") ? "the mean over heads" : "the attention rollout";
  return `computing ${what} in the page from every head\u2019s q and k: ${jobs.get(key).progress}\u2026`;
}

// ---------------------------------------------------------------- the page's matrix

const computed = new Map(); // "input/view/layer/head" -> rows, the last COMPUTED_KEPT
const COMPUTED_KEPT = 6;

/** A compact layer's head (a number, "mean" or "rollout") as the page's matrix: rows of
    rounded integers; null while the mean or rollout is being computed (pendingKey says). */
function compactMatrix(input, v, layer, head) {
  const key = `${input}/${v.id}/${layer}/${head}`;
  if (computed.has(key)) return computed.get(key);
  const c = v.layers[layer].compact, T = c.length;
  let weights;
  if (head === "mean") weights = later(key, () => meanSteps(input, v, layer));
  else if (head === "rollout") weights = later(key, () => rolloutSteps(input, v, layer));
  else weights = addHeadWeights(c, vectorsOf(input, v, layer), head, new Float64Array(T * T), 1);
  if (weights === null) return null;
  const rows = roundedRows(weights, T);
  computed.set(key, rows);
  if (computed.size > COMPUTED_KEPT) computed.delete(computed.keys().next().value);
  return rows;
}

/** The stated difference from the model's weights of what a compact view's head shows. */
function compactError(v, head) {
  const error = head === "mean" ? v.mean_error : head === "rollout" ? v.rollout_error : v.max_error;
  return ` \u00b7 computed in the page from float16 q, k: within ${error.toPrecision(2)} of the model's`;
}

const thumbBytes = new Map(); // a layer's thumbnails, decoded once

/** A head's stored thumbnail as a canvas, one pixel per block. */
function thumbCanvas(c, head) {
  if (!thumbBytes.has(c)) thumbBytes.set(c, bytesOf(c.thumb));
  const size = c.thumb_size, bytes = thumbBytes.get(c), canvas = document.createElement("canvas");
  canvas.width = size; canvas.height = size;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(size, size);
  const words = new Uint32Array(img.data.buffer), base = head * size * size;
  for (let p = 0; p < size * size; p++) words[p] = PALETTE[bytes[base + p]];
  ctx.putImageData(img, 0, 0);
  return canvas;
}
