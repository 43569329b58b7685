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

/** Float16 numbers first .. first + count - 1 of a base64 string of little-endian halves,
    as float64: only the base64 groups that hold them are decoded (3 bytes in 4 characters). */
function halvesAt(b64, first, count) {
  const start = 2 * first, group = Math.floor(start / 3), skip = start - 3 * group;
  const groups = Math.ceil((skip + 2 * count) / 3);
  const text = atob(b64.slice(4 * group, 4 * (group + groups)));
  const table = halfTable(), out = new Float64Array(count);
  for (let n = 0, b = skip; n < count; n++, b += 2) {
    out[n] = table[text.charCodeAt(b) | (text.charCodeAt(b + 1) << 8)];
  }
  return out;
}

const decoded = new Map(); // "input/view/layer/q|k/head" -> that head's T x d, float64

/** One head's q and the k of the key/value head it reads (grouped KV heads share one),
    each T x d, decoded from the layer's halves when first shown and kept. */
function headVectors(input, v, layer, head) {
  const c = v.layers[layer].compact, size = c.length * c.dim;
  const kv = Math.floor(head / (c.heads / c.kv_heads)), where = `${input}/${v.id}/${layer}`;
  const part = (name, index) => {
    const key = `${where}/${name}/${index}`;
    if (!decoded.has(key)) decoded.set(key, halvesAt(c[name], index * size, size));
    return decoded.get(key);
  };
  return { q: part("q", head), k: part("k", kv) };
}

/** The keys query i sees, [first, end): causal, and within the window where there is one. */
function keyRange(c, i) {
  const end = c.causal ? i + 1 : c.length;
  return [c.window ? Math.max(0, i - c.window + 1) : 0, end];
}

/** Adds share x softmax(scores[from + first .. from + end)) into out[base + first ..]. */
function addSoftmax(scores, from, first, end, out, base, share) {
  let top = -Infinity;
  for (let j = first; j < end; j++) if (scores[from + j] > top) top = scores[from + j];
  let total = 0;
  for (let j = first; j < end; j++) {
    const e = Math.exp(scores[from + j] - top);
    scores[from + j] = e; total += e;
  }
  const factor = share / total;
  for (let j = first; j < end; j++) out[base + j] += scores[from + j] * factor;
}

/** Adds share x one head's weights into out (T x T, row-major, float64): for each query the
    scores q_i . k_j / sqrt(d) over the keys it sees, then their softmax.  Two queries at a
    time, so that each key read serves both (measured in Chrome: ~40 ms a 1,024-token head
    against ~57 ms one row at a time), with two running sums each. */
function addHeadWeights(c, vectors, out, share) {
  const T = c.length, d = c.dim, even = d - (d % 2), { q, k } = vectors;
  const scores = new Float64Array(2 * T);
  for (let i = 0; i < T; i += 2) {
    const pair = i + 1 < T, r0 = keyRange(c, i), r1 = pair ? keyRange(c, i + 1) : r0;
    const first = Math.min(r0[0], r1[0]), end = Math.max(r0[1], r1[1]);
    const q0 = i * d, q1 = pair ? q0 + d : q0;
    for (let j = first; j < end; j++) {
      const kj = j * d;
      let a = 0, b = 0, x = 0, y = 0;
      for (let e = 0; e < even; e += 2) {
        const k0 = k[kj + e], k1 = k[kj + e + 1];
        a += q[q0 + e] * k0; b += q[q0 + e + 1] * k1;
        x += q[q1 + e] * k0; y += q[q1 + e + 1] * k1;
      }
      if (even < d) { a += q[q0 + even] * k[kj + even]; x += q[q1 + even] * k[kj + even]; }
      scores[j] = (a + b) * c.scale; scores[T + j] = (x + y) * c.scale;
    }
    addSoftmax(scores, 0, r0[0], r0[1], out, i * T, share);
    if (pair) addSoftmax(scores, T, r1[0], r1[1], out, (i + 1) * T, share);
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
  const c = v.layers[layer].compact;
  const out = new Float64Array(c.length * c.length);
  for (let h = 0; h < c.heads; h++) {
    addHeadWeights(c, headVectors(input, v, layer, h), out, 1 / c.heads);
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

let scratch = null; // one head's float64 weights, reused: 8 MB a change at 1,024 tokens

/** A zeroed float64 buffer of n numbers, the same one each time (rounded right after). */
function headScratch(n) {
  if (!scratch || scratch.length !== n) scratch = new Float64Array(n);
  else scratch.fill(0);
  return scratch;
}

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
  else weights = addHeadWeights(c, headVectors(input, v, layer, head), headScratch(T * T), 1);
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
