/* script/live/common.js (one concept: the layers every family's live pass is built from, so one
   file): what every live forward pass shares (qkv/explore/live.py packs the
   weights and the tokenizer): the weights by state_dict name (the page's float32 numbers,
   held as float64), the tokenizer, and the math of qkv's layers over row-major arrays, the
   matrix products in WebAssembly where the browser runs it.  Everything is computed in
   float64, so the page's numbers are PyTorch's float32 ones to about 1e-6.  A family's
   forward pass is script/live/<family>.js, which adds LIVE[family] = {run, page}. */

const LIVE = {};

/** The WebAssembly product of qkv/explore/wasm.py (its bytes, as base64), run by linear()
    where the browser compiles it: {f64 (the module's memory as float64), matmat, x, y
    (scratch byte offsets), room (numbers each scratch holds)}; null: linear() loops in
    JavaScript. */
const KERNEL_BYTES = "__WASM_MATMAT__";
let KERNEL = null, kernelOn = true;
/** Numbers in each of the kernel's two scratch areas (a product's input and output). */
const KERNEL_ROOM = 1 << 18;

/** The kernel with room for `count` float64 weights first, or null. */
function makeKernel(count) {
  try {
    const module = new WebAssembly.Module(bytesOf(KERNEL_BYTES));
    const instance = new WebAssembly.Instance(module, {}), memory = instance.exports.memory;
    const bytes = 8 * (count + 2 * KERNEL_ROOM), have = memory.buffer.byteLength;
    if (bytes > have) memory.grow(Math.ceil((bytes - have) / 65536));
    const x = 8 * count, y = x + 8 * KERNEL_ROOM;
    return { f64: new Float64Array(memory.buffer), matmat: instance.exports.matmat, x, y, room: KERNEL_ROOM };
  } catch (error) { // no WebAssembly (or no SIMD), or no memory for it: the JavaScript loops
    return null;
  }
}

/** The model of DATA.live: config, tokenizer, and w(name) -> {data, shape, at} (state_dict
    names; at: the byte offset of its numbers in the kernel's memory, when there is one). */
function liveModel(spec) {
  const bytes = bytesOf(spec.weights);
  const all = new Float32Array(bytes.buffer, 0, bytes.length / 4);
  KERNEL = makeKernel(all.length);
  // float64 numbers (a tied matrix once): in Chromium, float64 times float64 in the loops
  // below ran about 25 % faster than reading float32 numbers (measured), and the kernel
  // multiplies float64
  const tensors = {}, copies = new Map();
  for (const [name, [offset, shape]] of Object.entries(spec.tensors)) {
    const size = shape.reduce((a, b) => a * b, 1), key = `${offset}/${size}`;
    if (!copies.has(key)) {
      const numbers = all.subarray(offset, offset + size);
      if (KERNEL) {
        KERNEL.f64.set(numbers, offset);
        copies.set(key, { data: KERNEL.f64.subarray(offset, offset + size), at: 8 * offset });
      } else {
        copies.set(key, { data: Float64Array.from(numbers) });
      }
    }
    tensors[name] = { ...copies.get(key), shape };
  }
  const w = (name) => {
    if (!tensors[name]) throw new Error(`the page's weights have no ${name}`);
    return tensors[name];
  };
  const has = (name) => name in tensors;
  return { config: spec.config, tokenizer: makeTokenizer(spec.tokenizer), w, has };
}

// ---------------------------------------------------------------- tokenizers

const WORD_MARK = "\u2581";

/** qkv's tokenizers (qkv/data/tokenizers.py): encode(text) -> ids, tokens(ids), decode(ids).
    Ids 0..3 are the special tokens; decode skips them. */
function makeTokenizer(spec) {
  const specials = spec.specials, first = specials.length, unknown = specials.indexOf("<unk>");
  if (spec.kind === "char") {
    const ids = new Map(spec.alphabet.map((c, i) => [c, i + first]));
    return {
      encode: (text) => [...text].map((c) => ids.get(c) ?? unknown),
      tokens: (list) => list.map((i) => (i < first ? specials[i]
        : spec.alphabet[i - first] === " " ? WORD_MARK : spec.alphabet[i - first])),
      decode: (list) => list.filter((i) => i >= first).map((i) => spec.alphabet[i - first]).join(""),
    };
  }
  if (spec.kind === "words") {
    const ids = new Map(spec.words.map((word, i) => [word, i + first]));
    const word = (i) => (i < first ? specials[i] : spec.words[i - first]);
    return {
      encode: (text) => text.split(PY_WHITESPACE).filter((w) => w.length).map((w) => ids.get(w) ?? unknown),
      tokens: (list) => list.map(word),
      decode: (list) => list.filter((i) => i >= first).map(word).join(" "),
    };
  }
  return bpeTokenizer(spec);
}

/** The characters Python's str.split() splits at (JavaScript's \s differs: it has U+FEFF,
    not U+001C..U+001F or U+0085), so a word tokenizer's words are the library's. */
const PY_WHITESPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;

/** Byte-pair encoding as Hugging Face's BPE model runs it: each word split into its symbols,
    then the pair of adjacent symbols with the lowest merge rank merged, until none is left.
    "bpe": metaspace words (a space becomes \u2581, which opens every word), unknown symbols
    become <unk>; "bytebpe": GPT-2's byte-level pieces (each UTF-8 byte a printable char). */
function bpeTokenizer(spec) {
  const vocab = new Map(Object.entries(spec.vocab)), names = [];
  for (const [token, id] of vocab) names[id] = token;
  const ranks = new Map(spec.merges.map((m, r) => [m, r]));
  const cache = new Map();
  const merge = (symbols) => {
    for (;;) {
      let best = -1, rank = Infinity;
      for (let i = 0; i + 1 < symbols.length; i++) {
        const r = ranks.get(symbols[i] + " " + symbols[i + 1]);
        if (r !== undefined && r < rank) { rank = r; best = i; }
      }
      if (best < 0) return symbols;
      symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
    }
  };
  const word = (piece) => {
    if (!cache.has(piece)) {
      const ids = [], unk = spec.unk === null || spec.unk === undefined ? undefined : vocab.get(spec.unk);
      for (const symbol of merge([...piece])) {
        const id = vocab.get(symbol);
        if (id !== undefined) ids.push(id); else if (unk !== undefined) ids.push(unk);
      }
      cache.set(piece, ids);
    }
    return cache.get(piece);
  };
  const bytes = byteTable();
  const pieces = spec.kind === "bytebpe"
    ? (text) => (text.match(BYTE_LEVEL_SPLIT) || []).map((p) => [...new TextEncoder().encode(p)].map((b) => bytes.encode[b]).join(""))
    : (text) => {
      let marked = text.replaceAll(" ", WORD_MARK);
      if (spec.prepend !== "never" && !marked.startsWith(WORD_MARK)) marked = WORD_MARK + marked;
      return marked.split(new RegExp(`(?=${WORD_MARK})`)).filter((p) => p.length);
    };
  return {
    encode: (text) => pieces(text).flatMap(word),
    tokens: (list) => list.map((i) => names[i]),
    decode: (list) => {
      const text = list.filter((i) => i >= spec.specials.length).map((i) => names[i]).join("");
      if (spec.kind === "bytebpe") {
        return new TextDecoder().decode(new Uint8Array([...text].map((c) => bytes.decode.get(c))));
      }
      return text.replaceAll(WORD_MARK, " ").replace(/^ /, "");
    },
  };
}

/** GPT-2's pre-tokenizer: contractions, letters, digits, other symbols, each with one
    leading space, and runs of spaces. */
const BYTE_LEVEL_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** GPT-2's bytes -> printable characters table, both ways. */
function byteTable() {
  const keep = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const encode = [], decode = new Map();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const c = String.fromCodePoint(keep.includes(b) ? b : 256 + extra++);
    encode[b] = c; decode.set(c, b);
  }
  return { encode, decode };
}

// ---------------------------------------------------------------- layers

/** x (T x In) @ W^T + b, W (Out x In) as nn.Linear keeps it.  rows: which rows of W
    (a slice [from, to) of a stacked matrix such as in_proj_weight).  The kernel's product
    where it runs; else row by row of W, each row against every input (it stays in the
    cache), four running sums. */
function linear(x, T, weight, bias, rows) {
  const inputs = weight.shape[1], from = rows ? rows[0] : 0, to = rows ? rows[1] : weight.shape[0];
  const out = to - from, W = weight.data, b = bias ? bias.data : null;
  const k = KERNEL;
  if (k && kernelOn && weight.at !== undefined && inputs % 2 === 0 && T * Math.max(inputs, out) <= k.room) {
    k.f64.set(x.length === T * inputs ? x : x.subarray(0, T * inputs), k.x / 8);
    k.matmat(weight.at + 8 * from * inputs, k.x, k.y, out, inputs, T);
    const y = k.f64.slice(k.y / 8, k.y / 8 + T * out);
    if (b) for (let t = 0; t < T; t++) for (let o = 0; o < out; o++) y[t * out + o] += b[from + o];
    return y;
  }
  const y = new Float64Array(T * out);
  for (let o = 0; o < out; o++) {
    const wBase = (from + o) * inputs, add = b ? b[from + o] : 0;
    for (let t = 0; t < T; t++) {
      const xBase = t * inputs;
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0, i = 0;
      for (; i + 3 < inputs; i += 4) {
        s0 += x[xBase + i] * W[wBase + i];
        s1 += x[xBase + i + 1] * W[wBase + i + 1];
        s2 += x[xBase + i + 2] * W[wBase + i + 2];
        s3 += x[xBase + i + 3] * W[wBase + i + 3];
      }
      for (; i < inputs; i++) s0 += x[xBase + i] * W[wBase + i];
      y[t * out + o] = s0 + s1 + s2 + s3 + add;
    }
  }
  return y;
}

/** nn.LayerNorm over the last D numbers of each row (biased variance), weight and bias
    optional (a block built with bias=False has none). */
function layerNorm(x, T, D, weight, bias, eps) {
  const y = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    let mean = 0;
    for (let d = 0; d < D; d++) mean += x[t * D + d];
    mean /= D;
    let variance = 0;
    for (let d = 0; d < D; d++) { const c = x[t * D + d] - mean; variance += c * c; }
    const scale = 1 / Math.sqrt(variance / D + eps);
    for (let d = 0; d < D; d++) {
      const n = (x[t * D + d] - mean) * scale;
      y[t * D + d] = (weight ? n * weight.data[d] : n) + (bias ? bias.data[d] : 0);
    }
  }
  return y;
}

/** nn.RMSNorm over the last D numbers of each row: x / sqrt(mean(x^2) + eps), times the
    weight where the norm has one (a parameter-free RMSNorm has none). */
function rmsNorm(x, T, D, weight, eps) {
  const y = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    let square = 0;
    for (let d = 0; d < D; d++) square += x[t * D + d] * x[t * D + d];
    const scale = 1 / Math.sqrt(square / D + eps);
    for (let d = 0; d < D; d++) y[t * D + d] = x[t * D + d] * scale * (weight ? weight.data[d] : 1);
  }
  return y;
}

/** erf from the Chebyshev fit of erfc in Numerical Recipes (2nd ed., section 6.2): a
    relative error under 1.2e-7 everywhere, about float32's own (torch's float32 GELU), and
    a few multiplications where a series would take dozens of terms. */
function erf(x) {
  const z = Math.abs(x), t = 1 / (1 + 0.5 * z);
  const erfc = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
    t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
    t * 0.17087277)))))))));
  return x >= 0 ? 1 - erfc : erfc - 1;
}

/** qkv.layers.feedforward.ACTIVATIONS, by name. */
const ACTIVATIONS = {
  relu: (x) => (x > 0 ? x : 0),
  gelu: (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
  gelu_tanh: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x))),
  relu2: (x) => (x > 0 ? x * x : 0),
  silu: (x) => x / (1 + Math.exp(-x)),
};

/** FeedForward: contract(act(expand(x))); GatedFeedForward (a layer with a gate, SwiGLU):
    contract(act(gate(x)) * expand(x)). prefix: "blocks.0.feed_forward". */
function feedForward(model, prefix, x, T, activation) {
  const layer = (name) => linear(x, T, model.w(`${prefix}.${name}.weight`), optional(model, `${prefix}.${name}.bias`));
  const hidden = layer("expand");
  const act = ACTIVATIONS[activation];
  if (!act) throw new Error(`the live page has no activation ${activation}`);
  if (model.has(prefix + ".gate.weight")) {
    const gate = layer("gate");
    for (let i = 0; i < hidden.length; i++) hidden[i] *= act(gate[i]);
  } else {
    for (let i = 0; i < hidden.length; i++) hidden[i] = act(hidden[i]);
  }
  return linear(hidden, T, model.w(prefix + ".contract.weight"), optional(model, prefix + ".contract.bias"));
}

const optional = (model, name) => (model.has(name) ? model.w(name) : null);

/** A norm module by name: a LayerNorm (kind "layer", the default: its weight and bias,
    either may be absent) or an RMSNorm ("rms", "rms_free": its weight, if it has one). */
function norm(model, name, x, T, D, eps, kind = "layer") {
  const weight = optional(model, name + ".weight");
  if (kind === "layer") return layerNorm(x, T, D, weight, optional(model, name + ".bias"), eps);
  return rmsNorm(x, T, D, weight, eps);
}

/** x + y, in place into x. */
function addInto(x, y) {
  for (let i = 0; i < x.length; i++) x[i] += y[i];
  return x;
}

/** A residual sub-layer as qkv's blocks wrap it: pre-LN x + f(norm(x)), or post-LN
    norm(x + f(x)); normKind as norm's. */
function residual(model, normName, x, T, D, eps, normFirst, sublayer, normKind = "layer") {
  if (normFirst) return addInto(x, sublayer(norm(model, normName, x, T, D, eps, normKind)));
  return norm(model, normName, addInto(x, sublayer(x)), T, D, eps, normKind);
}

// ---------------------------------------------------------------- positions

/** sinusoidal_encoding (qkv.functional.positions): float64, then float32 as torch keeps it. */
function sinusoidal(position, D) {
  const row = new Float64Array(D);
  for (let e = 0; e < D; e += 2) {
    const angle = position / Math.pow(10000, e / D);
    row[e] = Math.fround(Math.sin(angle));
    if (e + 1 < D) row[e + 1] = Math.fround(Math.cos(angle));
  }
  return row;
}

/** Adds the input positions of a scheme to token vectors x (T x D) at positions start..:
    "sinusoidal", "learned" (prefix.embedding), "learned_concat" (prefix.projection of
    [x; P]); the attention schemes (rope, alibi) leave x as it is. */
function inputPositions(model, scheme, prefix, x, T, D, start) {
  if (scheme === "sinusoidal") {
    for (let t = 0; t < T; t++) {
      const row = sinusoidal(start + t, D);
      for (let d = 0; d < D; d++) x[t * D + d] += row[d];
    }
    return x;
  }
  if (scheme === "learned" || scheme === "learned_concat") {
    const table = model.w(prefix + ".embedding.weight"), width = table.shape[1];
    if (start + T > table.shape[0]) {
      throw new Error(`the model learned ${table.shape[0]} positions; this input needs ${start + T}`);
    }
    if (scheme === "learned") {
      for (let t = 0; t < T; t++) for (let d = 0; d < D; d++) x[t * D + d] += table.data[(start + t) * width + d];
      return x;
    }
    const joined = new Float64Array(T * (D + width));
    for (let t = 0; t < T; t++) {
      for (let d = 0; d < D; d++) joined[t * (D + width) + d] = x[t * D + d];
      for (let d = 0; d < width; d++) joined[t * (D + width) + D + d] = table.data[(start + t) * width + d];
    }
    return linear(joined, T, model.w(prefix + ".projection.weight"), model.w(prefix + ".projection.bias"));
  }
  if (scheme === "rope" || scheme === "alibi") return x;
  throw new Error(`the live page has no positions ${scheme}`);
}

/** RoPE (half-split pairs, qkv.functional.positions.rotary_angles), in place: x (T x H*Dh)
    at positions start..; frequencies: the Dh/2 inverse frequencies (default: theta 10000's;
    a model with another theta or a scaling rule passes qkv.functional.rope_scaling's). */
function rotate(x, T, heads, Dh, start, frequencies = null) {
  const half = Dh / 2;
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < half; i++) {
      const angle = (start + t) * (frequencies ? frequencies[i] : Math.pow(10000, -(2 * i) / Dh));
      const c = Math.fround(Math.cos(angle)), s = Math.fround(Math.sin(angle));
      for (let h = 0; h < heads; h++) {
        const base = t * heads * Dh + h * Dh, a = x[base + i], b = x[base + i + half];
        x[base + i] = a * c - b * s;
        x[base + i + half] = b * c + a * s;
      }
    }
  }
  return x;
}

/** ALiBi's slopes (qkv.functional.positions.alibi_slopes), as float32. */
function alibiSlopes(heads) {
  const powers = (n) => [...Array(n).keys()].map((i) => Math.pow(Math.pow(2, -8 / n), i + 1));
  const power = Math.pow(2, Math.floor(Math.log2(heads)));
  let slopes = powers(power);
  if (power < heads) slopes = slopes.concat(powers(2 * power).filter((_, i) => i % 2 === 0).slice(0, heads - power));
  return slopes.map(Math.fround);
}

// ---------------------------------------------------------------- attention

/** Multi-head attention of queries q (Tq x H*Dh) over keys and values k, v (Tk x Hkv*Dh)
    (grouped KV heads: query head h reads KV head floor(h / (H / Hkv))).  Query i sits at
    position queryStart + i, key j at position j; sees(i, j) on positions says whether it
    may attend; bias(h, i, j) (or null) adds to the score (ALiBi).  Returns the output
    (Tq x H*Dh) and the weights [head][query][key] (0 where unseen). */
function attend(q, k, v, Tq, Tk, heads, kvHeads, Dh, queryStart, sees, bias) {
  const out = new Float64Array(Tq * heads * Dh), weights = [], scale = 1 / Math.sqrt(Dh);
  const group = heads / kvHeads, scores = new Float64Array(Tk);
  for (let h = 0; h < heads; h++) {
    const kv = Math.floor(h / group), rows = [];
    for (let i = 0; i < Tq; i++) {
      const position = queryStart + i, row = new Array(Tk).fill(0);
      let top = -Infinity;
      for (let j = 0; j < Tk; j++) {
        if (!sees(position, j)) { scores[j] = -Infinity; continue; }
        const qBase = i * heads * Dh + h * Dh, kBase = j * kvHeads * Dh + kv * Dh;
        let s = 0;
        for (let e = 0; e < Dh; e++) s += q[qBase + e] * k[kBase + e];
        s *= scale;
        if (bias) s += bias(h, position, j);
        scores[j] = s;
        if (s > top) top = s;
      }
      let total = 0;
      for (let j = 0; j < Tk; j++) if (scores[j] > -Infinity) { row[j] = Math.exp(scores[j] - top); total += row[j]; }
      const outBase = i * heads * Dh + h * Dh;
      for (let j = 0; j < Tk; j++) {
        if (!row[j]) continue;
        row[j] /= total;
        const vBase = j * kvHeads * Dh + kv * Dh;
        for (let e = 0; e < Dh; e++) out[outBase + e] += row[j] * v[vBase + e];
      }
      rows.push(row);
    }
    weights.push(rows);
  }
  return { out, weights };
}

/** A (T x H*Dh) array as [head][position][Dh] lists, for the neuron view. */
function perHead(x, T, heads, Dh) {
  return [...Array(heads).keys()].map((h) => [...Array(T).keys()].map(
    (t) => Array.from(x.subarray(t * heads * Dh + h * Dh, t * heads * Dh + (h + 1) * Dh))));
}

/** log_softmax of one row of logits. */
function logSoftmax(row) {
  let top = -Infinity;
  for (const value of row) if (value > top) top = value;
  let total = 0;
  for (const value of row) total += Math.exp(value - top);
  const log = top + Math.log(total);
  return row.map((value) => value - log);
}

/** The first index of the largest value (torch.topk and argmax keep the first of a tie). */
function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

// ---------------------------------------------------------------- the page's data

/** The page's numbers of one head, as qkv.explore.summaries.head_summary computes them. */
function liveSummary(m, selfAttention) {
  const rows = m.length, round = (x) => (x === 0 ? 0 : Number(x.toPrecision(4)));
  let entropy = 0, first = 0, diagonal = 0, previous = 0;
  for (let i = 0; i < rows; i++) {
    for (const w of m[i]) if (w > 0) entropy -= w * Math.log2(w);
    first += m[i][0];
    if (selfAttention) {
      diagonal += m[i][i];
      if (i > 0) previous += m[i][i - 1];
    }
  }
  return {
    entropy: round(entropy / rows), first: round(first / rows),
    diagonal: selfAttention ? round(diagonal / rows) : null,
    previous: selfAttention ? (rows > 1 ? round(previous / (rows - 1)) : 0) : null,
  };
}

const meanOfHeads = (heads) => heads[0].map((row, i) => row.map((_, j) => {
  let sum = 0;
  for (const m of heads) sum += m[i][j];
  return sum / heads.length;
}));

/** One view of the page (qkv.explore.views.attention_view): per layer [head][Tq][Tk]
    weights, rounded to the page's integers, with their summaries. */
function liveView(id, title, queries, keys, querySide, keySide, layers) {
  const selfAttention = querySide === keySide;
  return {
    id, title, kind: selfAttention ? "self" : "cross", query_side: querySide, key_side: keySide,
    query_tokens: queries, key_tokens: keys,
    layers: layers.map((heads) => ({
      heads: heads.map((m) => m.map((row) => row.map((w) => Math.round(w * SCALE)))),
      summaries: heads.map((m) => liveSummary(m, selfAttention)),
      mean_summary: liveSummary(meanOfHeads(heads), selfAttention),
    })),
  };
}

/** Adds each layer's attention rollout (qkv.explore.summaries.attention_rollout) to a self-
    attention view made by liveView from the same layers. */
function addRollout(view, layers) {
  let current = null;
  layers.forEach((heads, l) => {
    const mean = meanOfHeads(heads), T = mean.length;
    const mixed = mean.map((row, i) => {
      const r = row.map((w, j) => 0.5 * w + (i === j ? 0.5 : 0));
      const total = Math.max(r.reduce((a, b) => a + b, 0), 1e-12);
      return r.map((w) => w / total);
    });
    current = current === null ? mixed : mixed.map((row) => [...Array(T).keys()].map((j) => {
      let s = 0;
      for (let m = 0; m < T; m++) s += row[m] * current[m][j];
      return s;
    }));
    view.layers[l].rollout = current.map((row) => row.map((w) => Math.round(w * SCALE)));
    view.layers[l].rollout_summary = liveSummary(current, true);
  });
  return view;
}

/** The neuron view's entry of one attention: per layer its q, k, v and scale. */
function liveVectors(perLayer) {
  const out = {};
  perLayer.forEach((found, l) => { out[String(l)] = found; });
  return out;
}
