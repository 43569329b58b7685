/* script/live/transformer.js: the Transformer translator live (qkv.models.transformer, whose
   state_dict names it reads): encode the typed sentence, decode greedily with a KV cache per
   decoder block, and keep every layer's and head's encoder self-, decoder self- and cross-
   attention, the logits of every step and each attention's q, k and v (the neuron view).
   The decoder's rows are the steps that read <s> and each generated token: the last one
   emits </s>, or (cut at the decoding length) the token after the last. */

/** The q, k, v rows of a packed attention (in_proj_weight stacks W_Q, W_K, W_V) for x. */
function packedProjection(model, prefix, x, T, D, part) {
  return linear(x, T, model.w(prefix + ".in_proj_weight"), optional(model, prefix + ".in_proj_bias"),
    [part * D, (part + 1) * D]);
}

LIVE.transformer = {
  placeholder: "type a sentence of your own, then Enter: the model translates it in this page",
  /** -> {ids, tokens, output, finished, score, attention: {encoder, decoder, cross}, logits,
      vectors}; options.maxLen: the most tokens to generate (default as qkv explore). */
  run(model, text, options = {}) {
    const c = model.config, D = c.d_model, H = c.heads, Dh = D / H, eps = c.eps, tk = model.tokenizer;
    const source = tk.encode(String(text).trim());
    if (!source.length) throw new Error("type a sentence: there is nothing to translate");
    const S = source.length;
    const limit = c.max_len;
    if (S > limit) throw new Error(`the input has ${S} tokens; the model's positions reach ${limit}`);
    const maxLen = options.maxLen ?? Math.min(Math.floor(1.5 * S) + 10, limit - 1);
    const slopes = c.positions === "alibi" ? alibiSlopes(H) : null;
    const rope = c.positions === "rope";
    const embed = (side, ids, start) => {
      const table = model.w(side + "_embedding.weight"), x = new Float64Array(ids.length * D);
      ids.forEach((id, t) => { for (let d = 0; d < D; d++) x[t * D + d] = table.data[id * D + d] * c.embedding_scale; });
      return inputPositions(model, c.positions, side + "_positions", x, ids.length, D, start);
    };
    const vectorsOf = (q, k, v, Tq, Tk) => (slopes ? { absent: "ALiBi adds a bias to the scores; the neuron view shows q.k alone" }
      : { q: perHead(q, Tq, H, Dh), k: perHead(k, Tk, H, Dh), v: perHead(v, Tk, H, Dh), scale: 1 / Math.sqrt(Dh) });

    // the encoder: every position at once
    const encoder = [], encoderVectors = [];
    const near = c.encoder_window === null || c.encoder_window === undefined
      ? () => true : (i, j) => Math.abs(i - j) <= c.encoder_window;
    const symmetric = slopes ? (h, i, j) => -slopes[h] * Math.abs(i - j) : null;
    let x = embed("source", source, 0);
    for (let l = 0; l < c.encoder_layers; l++) {
      const p = `encoder.layers.${l}`;
      x = residual(model, p + ".self_attention_norm", x, S, D, eps, c.norm_first, (h) => {
        const at = p + ".self_attention";
        const q = packedProjection(model, at, h, S, D, 0), k = packedProjection(model, at, h, S, D, 1);
        const v = packedProjection(model, at, h, S, D, 2);
        if (rope) { rotate(q, S, H, Dh, 0); rotate(k, S, H, Dh, 0); }
        const found = attend(q, k, v, S, S, H, H, Dh, 0, near, symmetric);
        encoder.push(found.weights); encoderVectors.push(vectorsOf(q, k, v, S, S));
        return linear(found.out, S, model.w(at + ".out_proj.weight"), optional(model, at + ".out_proj.bias"));
      });
      x = residual(model, p + ".feed_forward_norm", x, S, D, eps, c.norm_first,
        (h) => feedForward(model, p + ".feed_forward", h, S, c.activation));
    }
    const memory = c.final_norm ? norm(model, "encoder.norm", x, S, D, eps) : x;

    // the decoder: one token a step, keys and values cached per block
    const L = c.decoder_layers, rows = maxLen + 1;
    const memoryKV = [...Array(L).keys()].map((l) => {
      const at = `decoder.layers.${l}.cross_attention`;
      return { k: packedProjection(model, at, memory, S, D, 1), v: packedProjection(model, at, memory, S, D, 2) };
    });
    const cache = [...Array(L).keys()].map(() => ({ k: new Float64Array(rows * D), v: new Float64Array(rows * D), q: [], cq: [] }));
    const decoder = [...Array(L).keys()].map(() => [...Array(H).keys()].map(() => []));
    const cross = [...Array(L).keys()].map(() => [...Array(H).keys()].map(() => []));
    const causal = slopes ? (h, i, j) => -slopes[h] * (i - j) : null;
    const inputs = [c.bos_id], generated = [], logits = [];
    let finished = false, score = 0;
    for (let t = 0; ; t++) {
      let y = embed("target", [inputs[t]], t);
      for (let l = 0; l < L; l++) {
        const p = `decoder.layers.${l}`, kept = cache[l];
        y = residual(model, p + ".self_attention_norm", y, 1, D, eps, c.norm_first, (h) => {
          const at = p + ".self_attention";
          const q = packedProjection(model, at, h, 1, D, 0), k = packedProjection(model, at, h, 1, D, 1);
          const v = packedProjection(model, at, h, 1, D, 2);
          if (rope) { rotate(q, 1, H, Dh, t); rotate(k, 1, H, Dh, t); }
          kept.k.set(k, t * D); kept.v.set(v, t * D); kept.q.push(q);
          const found = attend(q, kept.k, kept.v, 1, t + 1, H, H, Dh, t, () => true, causal);
          found.weights.forEach((headRows, head) => decoder[l][head].push(headRows[0]));
          return linear(found.out, 1, model.w(at + ".out_proj.weight"), optional(model, at + ".out_proj.bias"));
        });
        y = residual(model, p + ".cross_attention_norm", y, 1, D, eps, c.norm_first, (h) => {
          const at = p + ".cross_attention";
          const q = packedProjection(model, at, h, 1, D, 0);
          kept.cq.push(q);
          const found = attend(q, memoryKV[l].k, memoryKV[l].v, 1, S, H, H, Dh, 0, () => true, null);
          found.weights.forEach((headRows, head) => cross[l][head].push(headRows[0]));
          return linear(found.out, 1, model.w(at + ".out_proj.weight"), optional(model, at + ".out_proj.bias"));
        });
        y = residual(model, p + ".feed_forward_norm", y, 1, D, eps, c.norm_first,
          (h) => feedForward(model, p + ".feed_forward", h, 1, c.activation));
      }
      if (c.final_norm) y = norm(model, "decoder.norm", y, 1, D, eps);
      const row = Array.from(linear(y, 1, model.w("output.weight"), null));
      logits.push(row);
      if (generated.length === maxLen) break; // cut: this row scores the token after the last
      const next = argmax(row);
      score += logSoftmax(row)[next];
      if (next === c.eos_id) { finished = true; break; }
      generated.push(next); inputs.push(next);
    }
    const T = inputs.length;
    const square = (layers) => layers.map((heads) => heads.map((m) => m.map((r) => r.concat(new Array(T - r.length).fill(0)))));
    const joined = (parts) => { const all = new Float64Array(parts.length * D); parts.forEach((part, i) => all.set(part, i * D)); return all; };
    return {
      ids: { source, output: generated },
      tokens: { source: tk.tokens(source), output: tk.tokens(generated) },
      output: tk.decode(generated), finished, score,
      attention: { encoder, decoder: square(decoder), cross },
      logits,
      vectors: {
        encoder: encoderVectors,
        decoder: cache.map((kept) => vectorsOf(joined(kept.q), kept.k.subarray(0, T * D), kept.v.subarray(0, T * D), T, T)),
        cross: cache.map((kept, l) => ({ q: perHead(joined(kept.cq), T, H, Dh), k: perHead(memoryKV[l].k, S, H, Dh),
          v: perHead(memoryKV[l].v, S, H, Dh), scale: 1 / Math.sqrt(Dh) })),
      },
    };
  },

  /** The page's entry for a result of run (qkv.explore.views.transformer_views' views). */
  page(result, text) {
    const source = result.tokens.source, inputs = ["<s>", ...result.tokens.output];
    const produced = [...result.tokens.output, result.finished ? "</s>" : "\u2026"];
    const sides = {
      encoder: ["encoder self-attention", source, source, "source", "source"],
      decoder: ["decoder self-attention", inputs, inputs, "target", "target"],
      cross: ["decoder \u2192 encoder cross-attention", produced, source, "target", "source"],
    };
    const views = Object.entries(sides).map(([id, [title, queries, keys, qSide, kSide]]) => {
      const layers = result.attention[id], view = liveView(id, title, queries, keys, qSide, kSide, layers);
      if (id === "encoder") addRollout(view, layers);
      return Object.assign(view, { causal: id === "decoder", vectors: liveVectors(result.vectors[id]) });
    });
    return {
      name: text, source: text, source_tokens: source, output: result.output,
      output_tokens: result.tokens.output, score: result.score, views,
    };
  },
};
