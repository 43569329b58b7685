/* script/live/lm.js: the language model live (qkv.models.lm.DecoderLM of any architecture:
   its norm, feed-forward, positions, QK-norm, embedding norm, per-layer windows and logit
   soft-cap are read from the config; the state_dict names it reads: token_embedding,
   positions.*, embedding_norm, blocks.{i}.self_attention.* (query_norm, key_norm),
   blocks.{i}.self_attention_norm, blocks.{i}.feed_forward.* (gate for SwiGLU),
   blocks.{i}.feed_forward_norm, final_norm, output): read the prompt, then generate greedily (temperature 0) or by sampling
   with the page's own seeded generator, a KV cache per block; keep every layer's and head's
   causal self-attention over the whole text, the logits of every position and q, k, v. */

/** A seeded generator of numbers in [0, 1) (mulberry32): the same seed, the same text. */
function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The next token: the most likely at temperature 0, else drawn from softmax(logits / T)
    over the topK likeliest (qkv.decoding.sample's rule; its draws are torch's, not these). */
function drawToken(row, temperature, topK, random) {
  if (!temperature) return argmax(row);
  let allowed = row.map((_, i) => i);
  if (topK && topK < row.length) allowed = allowed.sort((a, b) => row[b] - row[a]).slice(0, topK);
  const top = Math.max(...allowed.map((i) => row[i]) );
  const weights = allowed.map((i) => Math.exp((row[i] - top) / temperature));
  let u = random() * weights.reduce((a, b) => a + b, 0);
  for (let n = 0; n < allowed.length; n++) { u -= weights[n]; if (u <= 0) return allowed[n]; }
  return allowed[allowed.length - 1];
}

LIVE.lm = {
  placeholder: "type a prompt, then Enter: the model continues it in this page",
  options: ["generate", "temperature", "topK", "seed"],

  /** -> {ids, tokens, output, attention: {self}, logits, vectors}; options: generate (tokens
      to add, default 0), temperature (default 0: greedy), topK, seed (default 0). */
  run(model, text, options = {}) {
    const c = model.config, D = c.d_model, H = c.heads, Hkv = c.kv_heads, Dh = D / H, eps = c.eps;
    const tk = model.tokenizer, kvWidth = Hkv * Dh;
    const prompt = tk.encode(String(text));
    if (!prompt.length) throw new Error("type a prompt: at least one character");
    const generate = Math.max(0, Math.floor(options.generate ?? 0));
    const limit = c.max_positions ?? Infinity;
    if (prompt.length > limit) throw new Error(`the prompt has ${prompt.length} tokens; the model's positions reach ${limit}`);
    const total = Math.min(prompt.length + generate, limit);
    const random = seededRandom(options.seed ?? 0);
    const slopes = c.positions === "alibi" ? alibiSlopes(H) : null;
    const rope = c.positions === "rope", kind = c.norm;
    /** Per layer, whether query i sees key j: causal, inside the layer's window if it has one. */
    const sees = c.windows.map((window) => {
      const pattern = { causal: true, window, length: total };
      return (i, j) => { const [first, end] = keyRange(pattern, i); return j >= first && j < end; };
    });
    const bias = slopes ? (h, i, j) => -slopes[h] * (i - j) : null;
    const caches = [...Array(c.layers).keys()].map(() => ({
      q: new Float64Array(total * D), k: new Float64Array(total * kvWidth), v: new Float64Array(total * kvWidth),
    }));
    const attention = [...Array(c.layers).keys()].map(() => [...Array(H).keys()].map(() => []));
    const ids = [...prompt], logits = [];
    /** The positions start.. of ids through every block; the logits of each. */
    const forward = (start, count) => {
      const table = model.w("token_embedding.weight");
      let x = new Float64Array(count * D);
      for (let t = 0; t < count; t++) {
        for (let d = 0; d < D; d++) x[t * D + d] = table.data[ids[start + t] * D + d] * c.embedding_scale;
      }
      x = inputPositions(model, c.positions, "positions", x, count, D, start);
      if (c.embedding_norm) x = norm(model, "embedding_norm", x, count, D, eps, kind);
      for (let l = 0; l < c.layers; l++) {
        const p = `blocks.${l}`, kept = caches[l];
        x = residual(model, p + ".self_attention_norm", x, count, D, eps, c.norm_first, (h) => {
          const at = p + ".self_attention", w = model.w(at + ".in_proj_weight"), b = optional(model, at + ".in_proj_bias");
          let q = linear(h, count, w, b, [0, D]), k = linear(h, count, w, b, [D, D + kvWidth]);
          const v = linear(h, count, w, b, [D + kvWidth, D + 2 * kvWidth]);
          if (rope) { rotate(q, count, H, Dh, start, c.rope_frequencies); rotate(k, count, Hkv, Dh, start, c.rope_frequencies); }
          if (c.qk_norm) {  // every head's query and key normed over its Dh numbers, after RoPE
            q = norm(model, at + ".query_norm", q, count * H, Dh, eps, kind);
            k = norm(model, at + ".key_norm", k, count * Hkv, Dh, eps, kind);
          }
          kept.q.set(q, start * D); kept.k.set(k, start * kvWidth); kept.v.set(v, start * kvWidth);
          const found = attend(q, kept.k, kept.v, count, start + count, H, Hkv, Dh, start, sees[l], bias);
          found.weights.forEach((rows, head) => attention[l][head].push(...rows));
          return linear(found.out, count, model.w(at + ".out_proj.weight"), optional(model, at + ".out_proj.bias"));
        }, kind);
        x = residual(model, p + ".feed_forward_norm", x, count, D, eps, c.norm_first,
          (h) => feedForward(model, p + ".feed_forward", h, count, c.activation), kind);
      }
      if (c.norm_first) x = norm(model, "final_norm", x, count, D, eps, kind);
      const out = linear(x, count, model.w("output.weight"), null), V = out.length / count;
      const cap = c.logit_softcap;  // cap * tanh(z / cap)
      if (cap) for (let i = 0; i < out.length; i++) out[i] = cap * Math.tanh(out[i] / cap);
      for (let t = 0; t < count; t++) logits.push(Array.from(out.subarray(t * V, (t + 1) * V)));
    };
    forward(0, prompt.length);
    while (ids.length < total) {
      ids.push(drawToken(logits[logits.length - 1], options.temperature ?? 0, options.topK, random));
      forward(ids.length - 1, 1);
    }
    const T = ids.length;
    const square = attention.map((heads) => heads.map((rows) => rows.map((r) => r.concat(new Array(T - r.length).fill(0)))));
    const generated = ids.slice(prompt.length);
    return {
      ids: { source: prompt, output: generated, all: ids },
      tokens: { source: tk.tokens(prompt), output: tk.tokens(generated) },
      output: tk.decode(generated), prompt_length: prompt.length,
      attention: { self: square }, logits,
      vectors: {
        self: caches.map((kept) => (slopes
          ? { absent: "ALiBi adds a bias to the scores; the neuron view shows q.k alone" }
          : { q: perHead(kept.q, T, H, Dh), k: perHead(kept.k, T, Hkv, Dh), v: perHead(kept.v, T, Hkv, Dh), scale: 1 / Math.sqrt(Dh) })),
      },
    };
  },

  /** The page's entry for a result of run (qkv.explore.language's LM page): the per-head
      induction scores describe the heads, not the input, so they are the written page's. */
  page(result, text) {
    const tokens = [...result.tokens.source, ...result.tokens.output], layers = result.attention.self;
    const view = addRollout(liveView("self", "causal self-attention", tokens, tokens, "source", "source", layers), layers);
    const written = DATA.inputs[0].views[0].layers;
    view.layers.forEach((entry, l) => {
      entry.summaries.forEach((summary, h) => { summary.induction = written[l]?.summaries?.[h]?.induction ?? null; });
      entry.mean_summary.induction = written[l]?.mean_summary?.induction ?? null;
    });
    const windows = DATA.live.config.windows;
    Object.assign(view, { causal: true, vectors: liveVectors(result.vectors.self), windows, blocks: DATA.live.config.block });
    return {
      name: text, source: text, source_tokens: tokens, prompt_length: result.prompt_length,
      output: result.output, output_tokens: result.tokens.output, views: [view],
    };
  },
};
