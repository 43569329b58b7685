/* script/panels.js: the controls, the token rows, the large matrix (one DOM cell per weight,
   data-weight = the value drawn) and the per-head summaries.  Each render function takes
   the input x, its view v and the page state s it draws. */

function fill(select, items, selected) {
  select.replaceChildren(...items.map(([value, text]) => {
    const option = document.createElement("option");
    option.value = String(value); option.textContent = text;
    return option;
  }));
  select.value = String(selected);
}

function renderControls(x, v, s) {
  // a folder read by transformers says which implementation computed the weights
  const by = DATA.model.implementation ? ` \u2014 ${DATA.model.implementation}` : "";
  $("model-info").textContent = KIND.info + by;
  fill($("input-select"), DATA.inputs.map((item, i) => [i, `${i + 1}. ${item.name}`]), s.input);
  fill($("view-select"), x.views.map((w, i) => [i, w.title]), s.view);
  fill($("layer-select"), v.layers.map((_, l) => [l, "layer " + l]), s.layer);
  fill($("head-select"), headChoices(v, s.layer).map((h) => [h, headName(h)]), s.head);
  if (!$("metric-select").options.length) fill($("metric-select"), Object.entries(KIND.metrics), "entropy");
  $("layer-label").classList.toggle("hidden", !KIND.multiHead);
  $("head-label").classList.toggle("hidden", !KIND.multiHead);
}

function chip(text, side, index) {
  const span = document.createElement("span");
  span.className = "chip"; span.textContent = text;
  span.dataset.side = side; span.dataset.index = String(index);
  return span;
}

let tokensDrawn = null; // "input/view" of the token rows drawn

function renderTokens(x, v) {
  const drawnFor = `${DATA.inputs.indexOf(x)}/${x.views.indexOf(v)}`;
  if (tokensDrawn === drawnFor) return;
  tokensDrawn = drawnFor;
  const rows = [];
  if (KIND.sourceRow) rows.push([KIND.sourceRow, "source", x.source_tokens]);
  // target chips: one per decoding step, labelled as the view at hand labels its rows
  const steps = v.query_side === "target" ? v : x.views.find((w) => w.query_side === "target");
  if (steps && KIND.targetRow) rows.push([KIND.targetRow, "target", steps.query_tokens]);
  if (KIND.classifier) rows.push(["predicted", "predicted", x.output_tokens]);
  if (KIND.classifier && x.truth_tokens) rows.push(["true", "true", x.truth_tokens]);
  // a dual encoder's input: its logit and softmax share against each input of the other tower
  const sim = x.similarity;
  if (sim) rows.push([sim.title, "similarity", sim.names.map((name, i) =>
    `${short(name, 32)}: ${sim.probabilities[i].toFixed(3)} (logit ${sim.logits[i].toFixed(2)})`)]);
  $("tokens").replaceChildren(...rows.map(([label, side, tokens]) => {
    const row = document.createElement("div");
    row.className = "token-row";
    const name = document.createElement("span");
    name.className = "side"; name.textContent = label;
    row.append(name, ...tokens.map((t, i) => chip(t, side, i)));
    return row;
  }));
}

// ---------------------------------------------------------------- the large matrix

/** The cells and labels of the matrix drawn last, for the hover highlights. */
const drawn = { rowCells: [], colCells: [], rowLabels: [], colLabels: [] };

/** Above this many weights the matrix is one canvas (a pixel per weight), not DOM cells. */
const DOM_CELLS = 65536;

function renderMatrix(x, v, s) {
  const m = matrixOf(s.input, v, s.layer, s.head);
  const where = KIND.multiHead ? `layer ${s.layer}, ${headName(s.head)}` : "";
  $("head-title").textContent = `${v.title}${where ? " \u2014 " + where : ""}`;
  drawn.matrix = m;
  if (m === null) { renderPending(`${s.input}/${v.id}/${s.layer}/${s.head}`); return; }
  const rows = m.length, cols = m[0].length, top = maxOf(m);
  if (rows * cols > DOM_CELLS) renderMatrixCanvas(v, m, top);
  else renderMatrixCells(v, m, top);
  const error = (v.compact ? compactError(v, s.head) : "") + windowNote(v, s.layer, s.head);
  $("head-stats").textContent = describe(summaryOf(v, s.layer, s.head)) + error + (v.score !== undefined
    ? ` \u00b7 score ${v.score.toFixed(3)} (ranked by ${v.normalized_score.toFixed(3)})` : "");
  $("legend-max").textContent = "max " + (top / SCALE).toString() + " (colours scale to the matrix maximum)";
  const bar = $("legend-bar").getContext("2d");
  for (let i = 0; i < 160; i++) { bar.fillStyle = css(colour(i / 159)); bar.fillRect(i, 0, 1, 10); }
}

/** A long input's matrix: one canvas, a pixel per weight, scaled to the panel; hovering
    names the query, the key and the weight. */
function renderMatrixCanvas(v, m, top) {
  const rows = m.length, cols = m[0].length, canvas = document.createElement("canvas");
  canvas.width = cols; canvas.height = rows; canvas.className = "matrix-canvas";
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(cols, rows);
  const words = new Uint32Array(img.data.buffer), step = 255 / top;
  for (let i = 0; i < rows; i++) {
    const row = m[i], base = i * cols;
    for (let j = 0; j < cols; j++) words[base + j] = PALETTE[(row[j] * step + 0.5) | 0];
  }
  ctx.putImageData(img, 0, 0);
  const blocks = computedBlocks(v, state.layer, state.head);
  if (blocks) { // grey what the kernel skipped
    ctx.fillStyle = "rgba(160, 160, 160, 0.6)";
    blocks.forEach((row, qb) => row.forEach((done, kb) => {
      if (!done) ctx.fillRect(kb * v.blocks, qb * v.blocks, v.blocks, v.blocks);
    }));
  }
  const side = Math.max(320, Math.min(900, $("matrix-scroll").clientWidth - 20));
  canvas.style.width = side + "px"; canvas.style.height = Math.round((side * rows) / cols) + "px";
  canvas.addEventListener("mousemove", (e) => {
    const box = canvas.getBoundingClientRect();
    const i = Math.min(rows - 1, Math.floor(((e.clientY - box.top) / box.height) * rows));
    const j = Math.min(cols - 1, Math.floor(((e.clientX - box.left) / box.width) * cols));
    $("hover-info").textContent = `${v.query_tokens[i]} \u2192 ${v.key_tokens[j]}: ${m[i][j] / SCALE} (query ${i}, key ${j})`;
  });
  drawn.rowCells = []; drawn.colCells = []; drawn.rowLabels = []; drawn.colLabels = [];
  const grid = $("matrix");
  grid.style.gridTemplateColumns = "max-content";
  grid.replaceChildren(canvas);
}

/** A compact view's mean or rollout on the way: what has been computed so far. */
function renderPending(key) {
  const note = Object.assign(document.createElement("div"), { id: "pending-note", className: "muted" });
  note.textContent = pendingText(key);
  drawn.rowCells = []; drawn.colCells = []; drawn.rowLabels = []; drawn.colLabels = [];
  $("head-stats").textContent = "";
  $("matrix").replaceChildren(note);
}

function renderMatrixCells(v, m, top) {
  const rows = m.length, cols = m[0].length, blocks = computedBlocks(v, state.layer, state.head);
  const width = Math.max(320, $("matrix-scroll").clientWidth - 130);
  const cell = Math.max(6, Math.min(22, Math.floor(width / cols)));
  const every = Math.ceil(12 / cell); // labels thin out when cells are too small for text
  const grid = $("matrix");
  grid.style.setProperty("--cell", cell + "px");
  grid.style.gridTemplateColumns = `max-content repeat(${cols}, ${cell}px)`;
  const parts = [Object.assign(document.createElement("div"), { className: "corner" })];
  drawn.colLabels = v.key_tokens.map((t, j) => {
    const label = document.createElement("div");
    label.className = "col-label" + (j % every === 0 ? " shown" : "");
    label.dataset.col = String(j); label.title = t;
    label.textContent = j % every === 0 ? short(t) : "";
    parts.push(label);
    return label;
  });
  drawn.rowCells = []; drawn.colCells = v.key_tokens.map(() => []); drawn.rowLabels = [];
  for (let i = 0; i < rows; i++) {
    const label = document.createElement("div");
    label.className = "row-label" + (i % every === 0 ? " shown" : "");
    label.dataset.row = String(i); label.title = v.query_tokens[i];
    label.textContent = i % every === 0 ? short(v.query_tokens[i]) : "";
    drawn.rowLabels.push(label); parts.push(label);
    const cells = [];
    for (let j = 0; j < cols; j++) {
      const c = document.createElement("div");
      c.className = "cell" + (blocks && !blocks[Math.floor(i / v.blocks)][Math.floor(j / v.blocks)] ? " skipped" : "");
      c.dataset.row = String(i); c.dataset.col = String(j);
      c.dataset.weight = String(m[i][j] / SCALE);
      c.style.background = css(colour(m[i][j] / top));
      cells.push(c); drawn.colCells[j].push(c); parts.push(c);
    }
    drawn.rowCells.push(cells);
  }
  grid.replaceChildren(...parts);
}

/** A sliding-window layer computed in blocks (v.blocks: their size, on flex_attention):
    per query block and key block whether some query of the one sees some key of the other
    (0 <= i - j < window), which is what the kernel computes; null where every weight is,
    and for the rollout (a product of layers: it reaches past the window). */
function computedBlocks(v, layer, head) {
  const window = v.windows?.[layer], size = v.blocks;
  if (!window || !size || head === "rollout") return null;
  const count = Math.ceil(v.query_tokens.length / size), range = [...Array(count).keys()];
  // a block is computed when its last key is within the window of its first query
  const seen = (qb, kb) => kb <= qb && (kb + 1) * size - 1 >= keyRange({ causal: true, window }, qb * size)[0];
  return range.map((qb) => range.map((kb) => seen(qb, kb)));
}

function windowNote(v, layer, head) {
  const window = v.windows?.[layer];
  if (!window || head === "rollout") return "";
  const blocks = computedBlocks(v, layer, head);
  if (!blocks) return ` \u00b7 sliding window of ${window} keys (a mask: the weights outside it are 0)`;
  const done = blocks.flat().filter(Boolean).length;
  return ` \u00b7 sliding window of ${window} keys: flex_attention computed ${done} of ` +
    `${blocks.length ** 2} blocks of ${v.blocks}\u00d7${v.blocks} (the others, greyed, it skipped)`;
}

// ---------------------------------------------------------------- per-head summaries

function renderSummaries(x, v, s) {
  const panel = $("summary-panel");
  panel.classList.toggle("hidden", !KIND.multiHead);
  if (!KIND.multiHead) return;
  const metric = $("metric-select").value;
  const heads = headChoices(v, 0);
  const values = [];
  v.layers.forEach((_, l) => heads.forEach((h) => {
    const value = summaryOf(v, l, h)?.[metric];
    if (typeof value === "number" && h !== "mean" && h !== "rollout") values.push(value);
  }));
  // a head stands out when it is in the most extreme tenth: lowest entropy, else highest share
  const sorted = [...values].sort((a, b) => a - b);
  const cut = metric === "entropy" ? sorted[Math.floor(sorted.length * 0.1)]
    : sorted[Math.ceil(sorted.length * 0.9) - 1];
  const table = document.createElement("table");
  table.className = "summaries";
  table.innerHTML = "<tr><th></th>" + heads.map((h) => `<th>${typeof h === "number" ? "H" + h : h}</th>`).join("") + "</tr>";
  v.layers.forEach((_, l) => {
    const tr = document.createElement("tr");
    tr.innerHTML = `<th>L${l}</th>`;
    heads.forEach((h) => {
      const td = document.createElement("td");
      const value = summaryOf(v, l, h)?.[metric];
      td.textContent = value === null || value === undefined ? "\u2013" : value.toFixed(2);
      const out = typeof value === "number" && typeof h === "number" &&
        (metric === "entropy" ? value <= cut : value >= cut);
      td.classList.toggle("standout", out);
      td.classList.toggle("current", l === s.layer && String(h) === String(s.head));
      td.addEventListener("click", () => show({ layer: l, head: h }));
      tr.append(td);
    });
    table.append(tr);
  });
  $("summaries").replaceChildren(table);
}
