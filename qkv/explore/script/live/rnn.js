/* script/live/rnn.js: the RNN translator with attention live (qkv.models.rnn.RNNTranslator,
   whose state_dict names it reads): a bidirectional GRU or LSTM stack reads the sentence, a
   bridge makes the decoder's first state, and the decoder (Bahdanau's additive one, or
   Luong's with a dot, scaled dot or general score, input feeding or not) runs greedily one
   step at a time, keeping each step's alignment over the source: [1][1][target][source]. */

const sigmoid = (x) => 1 / (1 + Math.exp(-x));

/** One step of layer `layer` of an nn.GRU / nn.LSTM named `prefix` (suffix "_reverse" for
    the backward direction): gates [r | z | n] or [i | f | g | o] as PyTorch lays them out.
    gi: the input's projection W_ih x + b_ih where it was computed for every position at
    once (the encoder), else null.  Returns {h, c} (c for an LSTM). */
function cellStep(model, prefix, layer, suffix, cell, x, h, c, gi = null) {
  const name = (kind) => `${prefix}.${kind}_l${layer}${suffix}`;
  gi = gi || linear(x, 1, model.w(name("weight_ih")), optional(model, name("bias_ih")));
  const gh = linear(h, 1, model.w(name("weight_hh")), optional(model, name("bias_hh")));
  const H = h.length, out = new Float64Array(H);
  if (cell === "gru") {
    for (let e = 0; e < H; e++) {
      const r = sigmoid(gi[e] + gh[e]), z = sigmoid(gi[H + e] + gh[H + e]);
      const n = Math.tanh(gi[2 * H + e] + r * gh[2 * H + e]);
      out[e] = (1 - z) * n + z * h[e];
    }
    return { h: out };
  }
  const next = new Float64Array(H);
  for (let e = 0; e < H; e++) {
    const i = sigmoid(gi[e] + gh[e]), f = sigmoid(gi[H + e] + gh[H + e]);
    const g = Math.tanh(gi[2 * H + e] + gh[2 * H + e]), o = sigmoid(gi[3 * H + e] + gh[3 * H + e]);
    next[e] = f * c[e] + i * g;
    out[e] = o * Math.tanh(next[e]);
  }
  return { h: out, c: next };
}

/** The bidirectional encoder (qkv.layers.recurrent.BidirectionalEncoder): every position's
    [forward; backward] state of the top layer (S x 2H) and each layer's final states. */
function encodeBidirectional(model, x, S, c) {
  const H = c.hidden, finals = [], cells = [];
  let input = x;
  for (let l = 0; l < c.layers; l++) {
    const out = new Float64Array(S * 2 * H), last = [];
    for (const [suffix, offset] of [["", 0], ["_reverse", H]]) {
      let state = { h: new Float64Array(H), c: new Float64Array(H) };
      const name = (kind) => `encoder.rnn.${kind}_l${l}${suffix}`;
      // every position's input projection at once: the matrix is read once, not S times
      const projected = linear(input, S, model.w(name("weight_ih")), optional(model, name("bias_ih")));
      const gates = projected.length / S;
      for (let n = 0; n < S; n++) {
        const t = suffix ? S - 1 - n : n;
        state = cellStep(model, "encoder.rnn", l, suffix, c.cell, null, state.h, state.c,
          projected.subarray(t * gates, (t + 1) * gates));
        out.set(state.h, t * 2 * H + offset);
      }
      last.push(state);
    }
    finals.push(Float64Array.of(...last[0].h, ...last[1].h));
    if (c.cell === "lstm") cells.push(Float64Array.of(...last[0].c, ...last[1].c));
    input = out;
  }
  return { outputs: input, finals, cells };
}

/** The keys the decoder's score reads, computed once a sentence: Bahdanau's W_k h_j + b;
    Luong's h_j, projected for a dot score (W_K h_j), or W h_j for the general score. */
function preparedKeys(model, c, values, S) {
  const score = "decoder.attention.score";
  let keys = values;
  if (c.project_keys) keys = linear(values, S, model.w("decoder.attention.key_proj.weight"), null);
  if (c.decoder === "bahdanau") return linear(keys, S, model.w(score + ".key_proj.weight"), model.w(score + ".key_proj.bias"));
  if (c.score === "general" || c.score === "bilinear") return linear(keys, S, model.w(score + ".weight.weight"), null);
  return keys;
}

/** softmax over the source of one row of scores. */
function softmaxRow(scores) {
  const top = Math.max(...scores), e = scores.map((s) => Math.exp(s - top));
  const total = e.reduce((a, b) => a + b, 0);
  return e.map((value) => value / total);
}

LIVE.rnn = {
  placeholder: "type a sentence of your own, then Enter: the model translates it in this page",
  /** -> {ids, tokens, output, finished, score, attention: {cross: [1][1][T][S]}, logits};
      options.maxLen: the most tokens to generate (default as qkv explore). */
  run(model, text, options = {}) {
    const c = model.config, H = c.hidden, tk = model.tokenizer;
    const source = tk.encode(String(text).trim());
    if (!source.length) throw new Error("type a sentence: there is nothing to translate");
    const S = source.length, maxLen = options.maxLen ?? Math.floor(1.5 * S) + 10;
    const embed = (side, id) => {
      const table = model.w(side + "_embedding.weight"), E = table.shape[1];
      return Float64Array.from(table.data.subarray(id * E, (id + 1) * E));
    };
    const x = new Float64Array(S * model.w("source_embedding.weight").shape[1]);
    source.forEach((id, t) => x.set(embed("source", id), t * (x.length / S)));
    const encoded = encodeBidirectional(model, x, S, c), values = encoded.outputs, width = 2 * H;
    const bridge = (name, states) => states.map((s, l) => linear(s, 1, model.w(`${name}.${l}.weight`), model.w(`${name}.${l}.bias`)).map(Math.tanh));
    let hidden = bridge("bridge", encoded.finals);
    let cells = c.cell === "lstm" ? bridge("cell_bridge", encoded.cells) : hidden.map(() => null);
    // the keys, prepared once: Bahdanau's W_k h_j + b; Luong's projected (dot) or W h_j (general)
    const keys = preparedKeys(model, c, values, S), keyWidth = keys.length / S;
    const score = "decoder.attention.score";
    const queryProjection = c.decoder === "bahdanau" ? model.w(score + ".query_proj.weight") : null;
    const v = c.decoder === "bahdanau" ? model.w(score + ".v.weight").data : null;
    const scale = c.score === "scaled_dot" ? 1 / Math.sqrt(H) : 1;
    /** The scores of one query over every source position. */
    const scores = (query) => {
      const out = new Array(S);
      if (c.decoder === "bahdanau") { // v . tanh(W_q q + W_k h_j + b)
        const projected = linear(query, 1, queryProjection, null);
        for (let j = 0; j < S; j++) {
          let sum = 0;
          for (let a = 0, base = j * keyWidth; a < keyWidth; a++) sum += v[a] * (1 - 2 / (Math.exp(2 * (projected[a] + keys[base + a])) + 1)); // tanh: faster in V8
          out[j] = sum;
        }
        return out;
      }
      for (let j = 0; j < S; j++) { // q . k_j (scaled)
        let sum = 0;
        for (let a = 0, base = j * keyWidth; a < keyWidth; a++) sum += query[a] * keys[base + a];
        out[j] = sum * scale;
      }
      return out;
    };
    const contextOf = (alpha) => {
      const context = new Float64Array(width);
      alpha.forEach((a, j) => { for (let e = 0; e < width; e++) context[e] += a * values[j * width + e]; });
      return context;
    };
    /** Every decoder layer, one step: the new states, the top layer's output. */
    const recur = (input) => {
      let layerInput = input;
      for (let l = 0; l < c.layers; l++) {
        const next = cellStep(model, "decoder.rnn", l, "", c.cell, layerInput, hidden[l], cells[l]);
        hidden[l] = next.h; cells[l] = next.c ?? null; layerInput = next.h;
      }
      return layerInput;
    };
    let feed = new Float64Array(H);
    const inputs = [c.bos_id], generated = [], logits = [], alignment = [];
    let finished = false, total = 0;
    for (let t = 0; ; t++) {
      const e = embed("target", inputs[t]);
      let features;
      if (c.decoder === "bahdanau") {
        const alpha = softmaxRow(scores(hidden[c.layers - 1]));
        const context = contextOf(alpha);
        const top = recur(Float64Array.of(...e, ...context));
        features = linear(Float64Array.of(...top, ...context, ...e), 1, model.w("decoder.readout.weight"), model.w("decoder.readout.bias")).map(Math.tanh);
        alignment.push(alpha);
      } else {
        const top = recur(c.input_feeding ? Float64Array.of(...e, ...feed) : e);
        const alpha = softmaxRow(scores(top));
        features = linear(Float64Array.of(...contextOf(alpha), ...top), 1, model.w("decoder.combine.weight"), null).map(Math.tanh);
        feed = features;
        alignment.push(alpha);
      }
      const row = Array.from(linear(features, 1, model.w("output.weight"), model.w("output.bias")));
      logits.push(row);
      if (generated.length === maxLen) break; // cut: this row scores the token after the last
      const next = argmax(row);
      total += logSoftmax(row)[next];
      if (next === c.eos_id) { finished = true; break; }
      generated.push(next); inputs.push(next);
    }
    return {
      ids: { source, output: generated },
      tokens: { source: tk.tokens(source), output: tk.tokens(generated) },
      output: tk.decode(generated), finished, score: total,
      attention: { cross: [[alignment]] }, logits,
    };
  },

  /** The page's entry for a result of run (qkv.explore.views.alignment_view, greedy). */
  page(result, text) {
    const source = result.tokens.source;
    const produced = [...result.tokens.output, result.finished ? "</s>" : "\u2026"];
    const view = liveView("greedy", `greedy: score ${result.score.toFixed(3)}`, produced, source, "target", "source",
      result.attention.cross);
    Object.assign(view, { kind: "alignment", output: result.output, score: result.score,
      normalized_score: result.score, finished: result.finished }); // greedy ranks by the score
    return {
      name: text, source: text, source_tokens: source, output: result.output,
      output_tokens: result.tokens.output, score: result.score, views: [view],
    };
  },
};
