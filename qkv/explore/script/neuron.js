/* script/neuron.js: the neuron view, the equations for one query of one head made visible:
   the query vector q_i, each key k_j, the products q_i * k_j (one strip per key), the scores
   q_i . k_j / sqrt(d), the softmax weights, the values v_j and their weighted sum z_i.  The
   page computes the steps from the stored q, k, v (VECTOR_DIGITS significant digits);
   views store them only for the layers asked for (qkv explore --vectors). */

let neuronState = null; // the steps drawn last, for qkv.neuron()

/** The steps for query i of head h from a layer's stored vectors, over the keys it sees
    (causal: j <= i; a sliding window: i - window < j), from key `first` on. */
function neuronSteps(vec, head, i, causal, window) {
  const group = vec.q.length / vec.k.length, kv = Math.floor(head / group); // grouped KV heads
  const q = vec.q[head][i], keys = vec.k[kv], values = vec.v[kv];
  const [first, count] = keyRange({ causal, window, length: keys.length }, i);
  const products = [], scores = [];
  for (let j = first; j < count; j++) {
    const p = q.map((value, d) => value * keys[j][d]);
    products.push(p);
    scores.push(p.reduce((a, b) => a + b, 0) * vec.scale);
  }
  const top = Math.max(...scores);
  const exps = scores.map((value) => Math.exp(value - top));
  const total = exps.reduce((a, b) => a + b, 0);
  const weights = exps.map((value) => value / total);
  const z = q.map((_, d) => weights.reduce((sum, w, j) => sum + w * values[first + j][d], 0));
  return { q, first, keys: keys.slice(first, count), values: values.slice(first, count), products, scores, weights, z };
}

/** Blue for negative, red for positive, white at 0, against the largest magnitude. */
function diverging(value, top) {
  const t = Math.max(-1, Math.min(1, value / (top || 1)));
  const fade = (c) => Math.round(255 - (255 - c) * Math.abs(t));
  return t < 0 ? `rgb(${fade(33)},${fade(102)},${fade(172)})` : `rgb(${fade(178)},${fade(24)},${fade(43)})`;
}

function strip(vector, top, name) {
  const box = document.createElement("div");
  box.className = "strip " + name;
  for (const value of vector) {
    const cell = document.createElement("span");
    cell.style.background = diverging(value, top);
    cell.dataset.value = String(value); cell.title = value.toPrecision(5);
    box.append(cell);
  }
  return box;
}

const magnitude = (rows) => Math.max(1e-12, ...rows.map((row) => Math.max(...row.map(Math.abs))));

function neuronRow(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.append(cell); else td.textContent = cell;
    tr.append(td);
  }
  return tr;
}

function renderNeuron(x, v, s) {
  $("neuron-panel").classList.toggle("hidden", !KIND.multiHead);
  neuronState = null;
  if (!KIND.multiHead) return;
  const note = $("neuron-note"), box = $("neuron");
  const i = Math.min(s.word, v.query_tokens.length - 1);
  $("neuron-title").textContent = `neuron view: layer ${s.layer}, ${headName(s.head)}, query ${i} \u201c${v.query_tokens[i]}\u201d`;
  box.replaceChildren();
  if (v.vectors === undefined) { // a kind whose pages never store them (RNN and captioner views)
    note.textContent = `q, k and v are not stored in this page for the ${v.title}: the neuron ` +
      "view is written for language models, encoders and Transformer translators, with qkv explore --vectors";
    return;
  }
  const vec = v.vectors[String(s.layer)];
  if (!vec) {
    const stored = Object.keys(v.vectors);
    note.textContent = `q, k and v were not stored for layer ${s.layer}` +
      (stored.length ? ` (stored: layer ${stored.join(", ")})` : "") +
      `; write the page with --vectors ${s.layer} or --vectors all`;
    return;
  }
  if (vec.absent) { note.textContent = `no q, k, v for layer ${s.layer}: ${vec.absent}`; return; }
  if (typeof s.head !== "number") { note.textContent = "choose one head to see its steps"; return; }
  const steps = neuronSteps(vec, s.head, i, v.causal, v.windows?.[s.layer]);
  neuronState = { layer: s.layer, head: s.head, query: i, first: steps.first, scores: steps.scores, weights: steps.weights, z: steps.z, steps };
  note.textContent = `z_i = \u03a3_j softmax_j(q_i\u00b7k_j / \u221a${steps.q.length}) v_j, from q, k, v ` +
    (x.live ? "computed in this page" : "stored to 5 significant digits") + "; click a token to choose the query";
  const kTop = magnitude(steps.keys), pTop = magnitude(steps.products), vTop = magnitude(steps.values);
  const table = document.createElement("table");
  table.className = "neuron";
  table.append(neuronRow(["key", "k_j", "q_i \u2299 k_j", "score", "weight", "v_j"]));
  const wTop = Math.max(...steps.weights);
  steps.keys.forEach((key, j) => {
    const weight = document.createElement("span");
    weight.className = "weight"; weight.textContent = steps.weights[j].toFixed(4);
    weight.style.background = css(colour(steps.weights[j] / wTop));
    const tr = neuronRow([v.key_tokens[steps.first + j], strip(key, kTop, "key"), strip(steps.products[j], pTop, "product"),
      steps.scores[j].toFixed(4), weight, strip(steps.values[j], vTop, "value")]);
    tr.dataset.key = String(steps.first + j);
    tr.dataset.score = String(steps.scores[j]); tr.dataset.weight = String(steps.weights[j]);
    table.append(tr);
  });
  const qRow = neuronRow([`q_${i}`, strip(steps.q, magnitude([steps.q]), "query"), "", "", "", ""]);
  const zRow = neuronRow([`z_${i}`, "", "", "", "\u03a3 weight \u00d7 v_j =", strip(steps.z, vTop, "sum")]);
  qRow.className = "query-row"; zRow.className = "sum-row";
  table.prepend(qRow);
  table.append(zRow);
  box.append(table);
}

/** The neuron view drawn last as shapes, for its PNG and SVG: a row per key (its label, k_j,
    q_i * k_j, the score, the weight, v_j), q_i above and z_i below.  Returns {width,
    height, shapes}: each {x, y, w, h, fill} (a rectangle) or {x, y, text} (a label). */
function neuronShapes(v, fg) {
  const n = neuronState, steps = n.steps, cell = 6, row = 14, d = steps.q.length, strip = d * cell + 10;
  const kTop = magnitude(steps.keys), pTop = magnitude(steps.products), vTop = magnitude(steps.values);
  const wTop = Math.max(...steps.weights), label = 8 + 7.5 * Math.max(4, ...v.key_tokens.map((t) => short(t).length));
  const columns = [4, label, label + strip, label + 2 * strip, label + 2 * strip + 70, label + 2 * strip + 140];
  const shapes = [{ x: 4, y: 16, text: $("neuron-title").textContent, fill: fg }];
  const strips = (values, top, left, y) => values.forEach((value, e) => shapes.push(
    { x: left + e * cell, y, w: cell, h: row - 2, fill: diverging(value, top) }));
  let y = 28;
  ["key", "k_j", "q_i \u2299 k_j", "score", "weight", "v_j"].forEach((t, c) => shapes.push({ x: columns[c], y: y + 10, text: t, fill: fg }));
  y += row;
  shapes.push({ x: columns[0], y: y + 10, text: `q_${n.query}`, fill: fg });
  strips(steps.q, magnitude([steps.q]), columns[1], y);
  steps.keys.forEach((key, j) => {
    y += row;
    shapes.push({ x: columns[0], y: y + 10, text: short(v.key_tokens[steps.first + j]), fill: fg });
    strips(key, kTop, columns[1], y);
    strips(steps.products[j], pTop, columns[2], y);
    shapes.push({ x: columns[3], y: y + 10, text: steps.scores[j].toFixed(4), fill: fg });
    shapes.push({ x: columns[4], y, w: 60, h: row - 2, fill: css(colour(steps.weights[j] / wTop)) });
    shapes.push({ x: columns[4] + 4, y: y + 10, text: steps.weights[j].toFixed(4), fill: "#fff" });
    strips(steps.values[j], vTop, columns[5], y);
  });
  y += row;
  shapes.push({ x: columns[0], y: y + 10, text: `z_${n.query}`, fill: fg });
  strips(steps.z, vTop, columns[5], y);
  return { width: columns[5] + strip, height: y + row + 6, shapes };
}
