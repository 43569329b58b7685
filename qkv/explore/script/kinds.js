/* script/kinds.js: what the page shows for each kind of model, as one table.  A kind says how
   its model is described, whether its views have layers and heads (multiHead), how the token
   rows are labelled, what the small multiples are titled and which per-head summaries the
   summary table offers (metrics; default: METRICS).  A model family's explorer adapter
   either fills one of these kinds or declares its own kind of page (the data's
   model.page, with the header's line as model.page.info), so a new family needs no entry
   here. */

const METRICS = {
  entropy: "entropy (bits)", diagonal: "weight on the diagonal",
  previous: "weight on the previous token", first: "weight on the first token",
};

const KINDS = {
  transformer: {
    info: (m) => `${m.architecture || "Transformer"}: ${m.encoder_layers} + ${m.decoder_layers} layers, ${m.heads} heads`,
    multiHead: true, sourceRow: "source", targetRow: "output", classifier: false,
  },
  "rnn-attention": {
    info: (m) => `RNN translator: ${m.score} attention`,
    multiHead: false, sourceRow: "source", targetRow: "output", classifier: false,
    gridTitle: "every hypothesis, side by side",
  },
  captioner: {
    info: (m) => `captioner: ${m.grid}\u00d7${m.grid} regions, ${m.score} score`,
    multiHead: false, sourceRow: null, targetRow: "caption", classifier: false, term: "word",
    gridTitle: "every hypothesis, side by side",
  },
  "image-classifier": {
    info: (m) => `image classifier: ${m.grid}\u00d7${m.grid} regions` +
      (m.feature_attention ? ", feature-map self-attention" : "") +
      (m.pool === "attention" ? ", attention pooling" : ""),
    multiHead: false, sourceRow: "regions", targetRow: "output", classifier: true, term: "query",
    gridTitle: "every view",
  },
  "clip-classifier": {
    info: () => "clip classifier: attention pooling over the frames",
    multiHead: false, sourceRow: "frames", targetRow: "output", classifier: true, term: "query",
    gridTitle: "every view",
  },
  "frame-tagger": {
    info: (m) => `frame tagger: ${m.layers} layers, ${m.heads} heads over the frames`,
    multiHead: true, sourceRow: "frames", targetRow: "output", classifier: true, term: "query",
  },
  lm: {
    info: (m) => `${m.architecture || "language model"}: ${m.layers} layers, ${m.heads} heads` +
      (m.kv_heads !== m.heads ? ` (${m.kv_heads} key/value heads)` : "") + `, ${m.positions} positions`,
    multiHead: true, sourceRow: "tokens", targetRow: null, classifier: false,
    metrics: { ...METRICS, induction: "induction score (repeated random tokens)" },
  },
  vision: {
    info: (m) => `${m.architecture || "vision model"}: ${m.layers} layers, ${m.heads} heads over ` +
      `${m.patch ? m.patch + "\u00d7" + m.patch + "-pixel " : ""}patches`,
    multiHead: true, sourceRow: null, targetRow: null, classifier: false, term: "query",
    pickRegions: true,
  },
  encoder: {
    info: (m) => `${m.architecture || "encoder"}: ${m.layers} layers, ${m.heads} heads, bidirectional`,
    multiHead: true, sourceRow: "tokens", targetRow: null, classifier: false,
  },
};

function kindOf(model) {
  if (model.page) return { metrics: METRICS, ...model.page, info: () => model.page.info };
  const kind = KINDS[model.kind];
  if (!kind) throw new Error(`the page does not know models of kind "${model.kind}"`);
  return { metrics: METRICS, ...kind };
}
