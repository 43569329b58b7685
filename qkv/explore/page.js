/* qkv attention explorer.  Reads the JSON in #qkv-data (schema: docs/explorer.md), draws
   the selected matrix large (one DOM cell per weight, data-weight = the value drawn), the
   layers x heads (or the hypotheses) as small canvases, per-head summaries and, for
   captioners, the picture with each word's attention.  window.qkv.show / current drive it. */
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("qkv-data").textContent);
  const SCALE = DATA.weight_scale;
  const KIND = DATA.model.kind;
  const state = { input: 0, view: 0, layer: 0, head: 0, word: 0 };
  let hover = null; // {side: "source" | "target", index}
  const $ = (id) => document.getElementById(id);
  const images = []; // per input with a picture: a decoded <img>
  const meanCache = new Map();

  // ---------------------------------------------------------------- data access

  const input = () => DATA.inputs[state.input];
  const view = () => input().views[state.view];
  const multiHead = () => KIND === "transformer" || KIND === "frame-tagger";
  const CLASSIFIER = ["image-classifier", "clip-classifier", "frame-tagger"].includes(KIND);

  function headChoices(v, layer) {
    const entry = v.layers[layer];
    const choices = entry.heads.map((_, h) => h);
    if (entry.heads.length > 1) choices.push("mean");
    if (entry.rollout) choices.push("rollout");
    return choices;
  }

  function headName(head) {
    if (head === "mean") return "mean over heads";
    if (head === "rollout") return "attention rollout";
    return "head " + head;
  }

  /** The matrix as stored: integers, weight = value / SCALE.  "mean" rounds the mean of
      the stored heads; "rollout" is stored as computed by the library. */
  function matrixOf(v, layer, head) {
    const entry = v.layers[layer];
    if (head === "rollout") return entry.rollout;
    if (head !== "mean") return entry.heads[head];
    const key = state.input + "/" + v.id + "/" + layer;
    if (!meanCache.has(key)) {
      const heads = entry.heads;
      meanCache.set(key, heads[0].map((row, i) => row.map((_, j) => {
        let sum = 0;
        for (const m of heads) sum += m[i][j];
        return Math.round(sum / heads.length);
      })));
    }
    return meanCache.get(key);
  }

  function summaryOf(v, layer, head) {
    const entry = v.layers[layer];
    if (head === "mean") return entry.mean_summary;
    if (head === "rollout") return entry.rollout_summary;
    return entry.summaries[head];
  }

  // ---------------------------------------------------------------- colours

  const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
    [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
  function colour(t) {
    t = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(t));
    const f = t - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return [0, 1, 2].map((c) => Math.round(a[c] + (b[c] - a[c]) * f));
  }
  const css = (rgb) => "rgb(" + rgb.join(",") + ")";
  const maxOf = (m) => Math.max(1, ...m.map((row) => Math.max(...row)));
  const themed = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  /** The matrix as a canvas with one pixel per weight, coloured against its own maximum. */
  function pixels(m) {
    const rows = m.length, cols = m[0].length, top = maxOf(m);
    const canvas = document.createElement("canvas");
    canvas.width = cols; canvas.height = rows;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(cols, rows);
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const rgb = colour(m[i][j] / top), k = 4 * (i * cols + j);
      img.data[k] = rgb[0]; img.data[k + 1] = rgb[1]; img.data[k + 2] = rgb[2]; img.data[k + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    return canvas;
  }

  // ---------------------------------------------------------------- controls

  function fill(select, items, selected) {
    select.replaceChildren(...items.map(([value, text]) => {
      const option = document.createElement("option");
      option.value = String(value); option.textContent = text;
      return option;
    }));
    select.value = String(selected);
  }

  function renderControls() {
    const m = DATA.model;
    const info = {
      transformer: `Transformer: ${m.encoder_layers} + ${m.decoder_layers} layers, ${m.heads} heads`,
      captioner: `captioner: ${m.grid}\u00d7${m.grid} regions, ${m.score} score`,
      "image-classifier": `image classifier: ${m.grid}\u00d7${m.grid} regions` +
        (m.feature_attention ? ", feature-map self-attention" : "") +
        (m.pool === "attention" ? ", attention pooling" : ""),
      "clip-classifier": "clip classifier: attention pooling over the frames",
      "frame-tagger": `frame tagger: ${m.layers} layers, ${m.heads} heads over the frames`,
    };
    $("model-info").textContent = info[KIND] || `RNN translator: ${m.score} attention`;
    fill($("input-select"), DATA.inputs.map((x, i) => [i, `${i + 1}. ${x.name}`]), state.input);
    fill($("view-select"), input().views.map((v, i) => [i, v.title]), state.view);
    fill($("layer-select"), view().layers.map((_, l) => [l, "layer " + l]), state.layer);
    fill($("head-select"), headChoices(view(), state.layer).map((h) => [h, headName(h)]), state.head);
    $("layer-label").classList.toggle("hidden", !multiHead());
    $("head-label").classList.toggle("hidden", !multiHead());
  }

  function chip(text, side, index) {
    const span = document.createElement("span");
    span.className = "chip"; span.textContent = text;
    span.dataset.side = side; span.dataset.index = String(index);
    return span;
  }

  function renderTokens() {
    const x = input(), v = view(), box = $("tokens");
    const rows = [];
    const sourceName = !CLASSIFIER ? "source" : x.frames ? "frames" : "regions";
    if (KIND !== "captioner") rows.push([sourceName, "source", x.source_tokens]);
    // target chips: one per decoding step, labelled as the view at hand labels its rows
    const steps = v.query_side === "target" ? v : x.views.find((w) => w.query_side === "target");
    if (steps) rows.push([KIND === "captioner" ? "caption" : "output", "target", steps.query_tokens]);
    if (CLASSIFIER) rows.push(["predicted", "predicted", x.output_tokens]);
    if (CLASSIFIER && x.truth_tokens) rows.push(["true", "true", x.truth_tokens]);
    box.replaceChildren(...rows.map(([label, side, tokens]) => {
      const row = document.createElement("div");
      row.className = "token-row";
      const name = document.createElement("span");
      name.className = "side"; name.textContent = label;
      row.append(name, ...tokens.map((t, i) => chip(t, side, i)));
      return row;
    }));
  }

  // ---------------------------------------------------------------- the large matrix

  let rowCells = [], colCells = [], rowLabels = [], colLabels = [];

  function renderMatrix() {
    const v = view(), m = matrixOf(v, state.layer, state.head);
    const rows = m.length, cols = m[0].length, top = maxOf(m);
    const width = Math.max(320, $("matrix-scroll").clientWidth - 130);
    const cell = Math.max(6, Math.min(22, Math.floor(width / cols)));
    const every = Math.ceil(12 / cell); // labels thin out when cells are too small for text
    const grid = $("matrix");
    grid.style.setProperty("--cell", cell + "px");
    grid.style.gridTemplateColumns = `max-content repeat(${cols}, ${cell}px)`;
    const parts = [Object.assign(document.createElement("div"), { className: "corner" })];
    colLabels = v.key_tokens.map((t, j) => {
      const label = document.createElement("div");
      label.className = "col-label" + (j % every === 0 ? " shown" : "");
      label.dataset.col = String(j); label.title = t;
      label.textContent = j % every === 0 ? short(t) : "";
      parts.push(label);
      return label;
    });
    rowCells = []; colCells = v.key_tokens.map(() => []); rowLabels = [];
    for (let i = 0; i < rows; i++) {
      const label = document.createElement("div");
      label.className = "row-label" + (i % every === 0 ? " shown" : "");
      label.dataset.row = String(i); label.title = v.query_tokens[i];
      label.textContent = i % every === 0 ? short(v.query_tokens[i]) : "";
      rowLabels.push(label); parts.push(label);
      const cells = [];
      for (let j = 0; j < cols; j++) {
        const c = document.createElement("div");
        c.className = "cell"; c.dataset.row = String(i); c.dataset.col = String(j);
        c.dataset.weight = String(m[i][j] / SCALE);
        c.style.background = css(colour(m[i][j] / top));
        cells.push(c); colCells[j].push(c); parts.push(c);
      }
      rowCells.push(cells);
    }
    grid.replaceChildren(...parts);
    const where = multiHead() ? `layer ${state.layer}, ${headName(state.head)}` : "";
    $("head-title").textContent = `${v.title}${where ? " \u2014 " + where : ""}`;
    const s = summaryOf(v, state.layer, state.head);
    $("head-stats").textContent = describe(s) + (v.score !== undefined
      ? ` \u00b7 score ${v.score.toFixed(3)} (ranked by ${v.normalized_score.toFixed(3)})` : "");
    $("legend-max").textContent = "max " + (top / SCALE).toString() + " (colours scale to the matrix maximum)";
    const bar = $("legend-bar").getContext("2d");
    for (let x = 0; x < 160; x++) { bar.fillStyle = css(colour(x / 159)); bar.fillRect(x, 0, 1, 10); }
  }

  const short = (label, most = 14) => (label.length > most ? label.slice(0, most - 1) + "\u2026" : label);

  function describe(s) {
    const parts = [`entropy ${s.entropy} bits`];
    if (s.diagonal !== null) parts.push(`diagonal ${s.diagonal}`, `previous ${s.previous}`);
    parts.push(`first ${s.first}`);
    return parts.join(" \u00b7 ");
  }

  // ---------------------------------------------------------------- small multiples

  let smalls = []; // {canvas, matrix pixels, view, layer, head}

  function gridItems() {
    const x = input();
    if (!multiHead()) return x.views.map((v, i) => ({ view: i, layer: 0, head: 0, caption: v.title }));
    const v = view(), items = [];
    v.layers.forEach((_, l) => headChoices(v, l).forEach((h) => items.push({
      view: state.view, layer: l, head: h,
      caption: `L${l} ${h === "mean" ? "mean" : h === "rollout" ? "rollout" : "H" + h}`,
    })));
    return items;
  }

  function renderGrid() {
    const x = input(), items = gridItems(), grid = $("grid");
    const columns = multiHead() ? headChoices(view(), 0).length : Math.min(4, items.length);
    grid.style.gridTemplateColumns = `repeat(${columns}, max-content)`;
    $("grid-title").textContent = multiHead() ? `${view().title}: every layer and head`
      : CLASSIFIER ? "every view" : "every hypothesis, side by side";
    const size = multiHead() ? 64 : 120; // fixed: the grid never grows with the input's length
    smalls = items.map((item) => {
      const v = x.views[item.view], m = matrixOf(v, item.layer, item.head);
      const box = document.createElement("div");
      box.className = "small";
      Object.assign(box.dataset, { view: item.view, layer: item.layer, head: item.head });
      const canvas = document.createElement("canvas");
      const aspect = m.length / m[0].length;
      canvas.width = size; canvas.height = Math.max(8, Math.round(size * Math.min(2, aspect)));
      const caption = document.createElement("span");
      caption.textContent = item.caption;
      box.append(canvas, caption);
      if (!multiHead() && v.output !== undefined) {
        const text = document.createElement("span");
        text.className = "stat"; text.textContent = short(v.output || "(empty)", 28); text.title = v.output;
        box.append(text);
      }
      if (multiHead()) {
        const stat = document.createElement("span");
        stat.className = "stat";
        const s = summaryOf(v, item.layer, item.head);
        stat.textContent = `H ${s.entropy}` + (s.diagonal !== null ? ` d ${s.diagonal}` : "");
        box.append(stat);
      }
      box.addEventListener("click", () => show({ view: item.view, layer: item.layer, head: parseHead(item.head) }));
      return { ...item, box, canvas, image: pixels(m), data: v };
    });
    grid.replaceChildren(...smalls.map((s) => s.box));
    drawSmalls();
  }

  function drawSmalls() {
    for (const s of smalls) {
      const ctx = s.canvas.getContext("2d"), w = s.canvas.width, h = s.canvas.height;
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(s.image, 0, 0, w, h);
      if (hover) band(ctx, s.data, s.image.height, s.image.width, w, h);
      s.box.classList.toggle("current", s.view === state.view && s.layer === state.layer &&
        String(s.head) === String(state.head));
    }
  }

  function band(ctx, v, rows, cols, w, h) {
    ctx.fillStyle = themed("--highlight");
    if (v.query_side === hover.side && hover.index < rows) {
      ctx.fillRect(0, (hover.index * h) / rows, w, Math.max(1, h / rows));
    }
    if (v.key_side === hover.side && hover.index < cols) {
      ctx.fillRect((hover.index * w) / cols, 0, Math.max(1, w / cols), h);
    }
  }

  // ---------------------------------------------------------------- per-head summaries

  function renderSummaries() {
    const panel = $("summary-panel");
    panel.classList.toggle("hidden", !multiHead());
    if (!multiHead()) return;
    const v = view(), metric = $("metric-select").value;
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
        td.classList.toggle("current", l === state.layer && String(h) === String(state.head));
        td.addEventListener("click", () => show({ layer: l, head: h }));
        tr.append(td);
      });
      table.append(tr);
    });
    $("summaries").replaceChildren(table);
  }

  // ---------------------------------------------------------------- captioners: the picture

  function attentionMap(v, word) {
    return v.layers[0].heads[0][word];
  }

  /** The picture dimmed where the word's attention is low: the region grid drawn one pixel
      per region, then upsampled with smoothing (bilinear) over the image. */
  function drawOverlay(canvas, x, v, word) {
    const [gh, gw] = x.image.grid;
    const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
    const img = images[state.input];
    ctx.fillStyle = themed("--bg"); ctx.fillRect(0, 0, w, h);
    if (!img || !img.complete) return;
    ctx.imageSmoothingEnabled = true; ctx.imageSmoothingQuality = "high";
    ctx.drawImage(img, 0, 0, w, h);
    const values = attentionMap(v, word);
    const top = Math.max(1, ...values);
    const small = document.createElement("canvas");
    small.width = gw; small.height = gh;
    const sctx = small.getContext("2d"), data = sctx.createImageData(gw, gh);
    values.forEach((value, p) => {
      data.data[4 * p + 3] = Math.round(215 * (1 - value / top)); // black, opaque where unattended
    });
    sctx.putImageData(data, 0, 0);
    ctx.drawImage(small, 0, 0, w, h);
    if (pickable(x, v)) { // the query region, outlined
      ctx.strokeStyle = themed("--highlight"); ctx.lineWidth = Math.max(1, w / 128);
      ctx.strokeRect(((word % gw) * w) / gw, (Math.floor(word / gw) * h) / gh, w / gw, h / gh);
    }
  }

  /** An image classifier's feature-map view: one query per region, picked on the picture. */
  const pickable = (x, v) => x.image && CLASSIFIER && v.query_tokens.length === x.image.grid[0] * x.image.grid[1];

  function pickRegion(event) {
    const x = input(), v = view();
    if (!pickable(x, v)) return;
    const [gh, gw] = x.image.grid, box = event.target.getBoundingClientRect();
    const col = Math.min(gw - 1, Math.max(0, Math.floor(((event.clientX - box.left) / box.width) * gw)));
    const row = Math.min(gh - 1, Math.max(0, Math.floor(((event.clientY - box.top) / box.height) * gh)));
    if (row * gw + col !== state.word) show({ word: row * gw + col });
  }

  function renderImage() {
    const panel = $("image-panel"), x = input();
    panel.classList.toggle("hidden", !x.image);
    if (!x.image) return;
    const v = view(), words = v.query_tokens;
    state.word = Math.min(state.word, words.length - 1);
    const gate = v.gates ? ` \u00b7 \u03b2 = ${v.gates[state.word]}` : "";
    const term = CLASSIFIER ? "query" : "word";
    const verdict = CLASSIFIER ? ` \u00b7 predicted ${x.output}` + (x.truth_tokens ? `, true ${x.truth_tokens[0]}` : "") : "";
    $("word-title").textContent = `${term} ${state.word + 1}/${words.length}: \u201c${words[state.word]}\u201d${gate}${verdict}`;
    drawOverlay($("overlay"), x, v, state.word);
    $("strip-title").textContent = CLASSIFIER ? "every query" : "every word";
    $("strip").replaceChildren(...words.map((word, t) => {
      const frame = document.createElement("div");
      frame.className = "frame" + (t === state.word ? " current" : "");
      const canvas = document.createElement("canvas");
      canvas.width = 96; canvas.height = 96;
      drawOverlay(canvas, x, v, t);
      const label = document.createElement("span");
      label.textContent = word + (v.gates ? ` (\u03b2 ${v.gates[t].toFixed(2)})` : "");
      frame.append(canvas, label);
      frame.addEventListener("click", () => show({ word: t }));
      return frame;
    }));
  }

  // ---------------------------------------------------------------- clips: the frames

  /** Each frame with a bar of its weight: the pooling weights of a clip classifier, or for a
      frame tagger the row of the selected (query) frame in the matrix shown. */
  function renderFrames() {
    const panel = $("frames-panel"), x = input();
    panel.classList.toggle("hidden", !x.frames);
    if (!x.frames) return;
    const v = view(), m = matrixOf(v, state.layer, state.head);
    const query = Math.min(state.word, m.length - 1), row = m[query], top = Math.max(1, ...row);
    const truth = x.truth_tokens ? `, true ${x.truth_tokens.length > 1 ? x.truth_tokens.join(" ") : x.truth_tokens[0]}` : "";
    $("frames-title").textContent = m.length > 1
      ? `frame ${query} (${v.query_tokens[query]}) attends to (click a frame to query it)`
      : `weight of each frame: predicted ${x.output}${truth}`;
    $("frames").replaceChildren(...x.frames.map((src, t) => {
      const box = document.createElement("div");
      box.className = "clip-frame" + (m.length > 1 && t === query ? " current" : "");
      const img = document.createElement("img");
      img.src = src; img.alt = v.key_tokens[t];
      const bar = document.createElement("div");
      bar.className = "weight-bar";
      bar.dataset.frame = String(t); bar.dataset.weight = String(row[t] / SCALE);
      const fill = document.createElement("div");
      fill.style.height = `${(100 * row[t]) / top}%`;
      fill.style.background = css(colour(row[t] / top));
      bar.append(fill);
      const label = document.createElement("span");
      const truthHere = x.truth_tokens && x.truth_tokens.length === x.frames.length ? ` (${x.truth_tokens[t]})` : "";
      label.textContent = `${v.key_tokens[t]}${truthHere} ${(row[t] / SCALE).toFixed(3)}`;
      box.append(img, bar, label);
      if (m.length > 1) box.addEventListener("click", () => show({ word: t }));
      return box;
    }));
  }

  // ---------------------------------------------------------------- hover

  function setHover(next) {
    hover = next;
    for (const el of document.querySelectorAll(".matrix .hl, .chip.hl")) el.classList.remove("hl");
    if (hover) {
      const v = view();
      if (v.query_side === hover.side && rowCells[hover.index]) {
        rowLabels[hover.index].classList.add("hl");
        for (const c of rowCells[hover.index]) c.classList.add("hl");
      }
      if (v.key_side === hover.side && colCells[hover.index]) {
        colLabels[hover.index].classList.add("hl");
        for (const c of colCells[hover.index]) c.classList.add("hl");
      }
      for (const c of document.querySelectorAll(`.chip[data-side="${hover.side}"][data-index="${hover.index}"]`)) {
        c.classList.add("hl");
      }
    }
    drawSmalls();
  }

  function onMatrixHover(event) {
    const el = event.target, v = view();
    if (el.dataset.row !== undefined && el.classList.contains("row-label")) {
      setHover({ side: v.query_side, index: Number(el.dataset.row) });
    } else if (el.classList.contains("col-label")) {
      setHover({ side: v.key_side, index: Number(el.dataset.col) });
    } else if (el.classList.contains("cell")) {
      const i = Number(el.dataset.row), j = Number(el.dataset.col);
      setHover({ side: v.query_side, index: i });
      if (v.key_side !== v.query_side || i !== j) {
        colLabels[j].classList.add("hl");
        for (const c of colCells[j]) c.classList.add("hl");
      }
      $("hover-info").textContent =
        `${v.query_tokens[i]} \u2192 ${v.key_tokens[j]}: ${el.dataset.weight}`;
    }
  }

  // ---------------------------------------------------------------- Save PNG

  function panelCanvas(panel) {
    const bg = themed("--bg"), fg = themed("--fg");
    const out = document.createElement("canvas"), ctx = out.getContext("2d");
    const font = "12px ui-monospace, monospace";
    if (panel === "head") {
      const v = view(), m = matrixOf(v, state.layer, state.head), top = maxOf(m);
      const rows = m.length, cols = m[0].length;
      const cell = Math.max(4, Math.min(18, Math.floor(1600 / Math.max(rows, cols))));
      const every = Math.ceil(12 / cell);
      ctx.font = font;
      const labelW = Math.ceil(Math.max(...v.query_tokens.map((t) => ctx.measureText(t).width))) + 8;
      const labelH = Math.ceil(Math.max(...v.key_tokens.map((t) => ctx.measureText(t).width))) + 8;
      out.width = labelW + cols * cell + 10; out.height = 24 + labelH + rows * cell + 10;
      ctx.fillStyle = bg; ctx.fillRect(0, 0, out.width, out.height);
      ctx.font = font; ctx.fillStyle = fg; ctx.fillText($("head-title").textContent, 4, 16);
      for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
        ctx.fillStyle = css(colour(m[i][j] / top));
        ctx.fillRect(labelW + j * cell, 24 + labelH + i * cell, cell, cell);
      }
      ctx.fillStyle = fg; ctx.textBaseline = "middle";
      v.query_tokens.forEach((t, i) => {
        if (i % every === 0) ctx.fillText(t, 4, 24 + labelH + (i + 0.5) * cell);
      });
      v.key_tokens.forEach((t, j) => {
        if (j % every) return;
        ctx.save(); ctx.translate(labelW + (j + 0.5) * cell, 24 + labelH - 4);
        ctx.rotate(-Math.PI / 2); ctx.fillText(t, 0, 0); ctx.restore();
      });
      return out;
    }
    const sources = panel === "grid" ? smalls.map((s) => [s.canvas, s.box.textContent])
      : panel === "image" ? [[$("overlay"), $("word-title").textContent]]
        : [...document.querySelectorAll("#strip .frame")].map((f) => [f.querySelector("canvas"), f.textContent]);
    const columns = panel === "grid" ? Math.max(1, Math.min(sources.length,
      multiHead() ? headChoices(view(), 0).length : 4)) : panel === "strip" ? sources.length : 1;
    const scale = panel === "strip" ? 1.5 : panel === "grid" ? 1.5 : 1;
    const cw = Math.max(...sources.map(([c]) => c.width)) * scale + 8;
    const ch = Math.max(...sources.map(([c]) => c.height)) * scale + 22;
    out.width = Math.max(columns * cw, 240); out.height = Math.ceil(sources.length / columns) * ch + 24;
    ctx.fillStyle = bg; ctx.fillRect(0, 0, out.width, out.height);
    ctx.font = font; ctx.fillStyle = fg;
    ctx.fillText(panel === "grid" ? $("grid-title").textContent : input().output, 4, 16);
    sources.forEach(([canvas, caption], k) => {
      const x = (k % columns) * cw + 4, y = Math.floor(k / columns) * ch + 24;
      ctx.imageSmoothingEnabled = panel !== "grid";
      ctx.drawImage(canvas, x, y, canvas.width * scale, canvas.height * scale);
      ctx.fillStyle = fg; ctx.fillText(caption, x, y + canvas.height * scale + 14, cw - 6);
    });
    return out;
  }

  function png(panel) {
    if (!["head", "grid", "image", "strip"].includes(panel)) throw new Error(`no panel "${panel}"`);
    return panelCanvas(panel).toDataURL("image/png");
  }

  function savePng(panel) {
    const link = document.createElement("a");
    link.href = png(panel);
    link.download = `qkv-${KIND}-input${state.input + 1}-${panel}.png`;
    document.body.append(link); link.click(); link.remove();
  }

  // ---------------------------------------------------------------- show / current

  function parseHead(head) {
    return head === "mean" || head === "rollout" ? head : Number(head);
  }

  function show(request = {}) {
    const next = { ...state };
    if (request.input !== undefined) {
      const i = typeof request.input === "number" ? request.input
        : DATA.inputs.findIndex((x) => x.name === request.input);
      if (!(i >= 0 && i < DATA.inputs.length)) throw new Error(`no input ${request.input}`);
      if (i !== next.input) Object.assign(next, { input: i, view: 0, layer: 0, head: 0, word: 0 });
    }
    const views = DATA.inputs[next.input].views;
    if (request.view !== undefined) {
      const i = typeof request.view === "number" ? request.view : views.findIndex((v) => v.id === request.view);
      if (!(i >= 0 && i < views.length)) throw new Error(`no view ${request.view}; views: ${views.map((v) => v.id)}`);
      next.view = i;
    }
    const v = views[next.view];
    if (request.layer !== undefined) next.layer = request.layer;
    if (!(Number.isInteger(next.layer) && next.layer >= 0 && next.layer < v.layers.length)) {
      if (request.layer !== undefined) throw new Error(`no layer ${request.layer}: ${v.layers.length} layer(s)`);
      next.layer = 0;
    }
    if (request.head !== undefined) next.head = request.head;
    if (!headChoices(v, next.layer).some((h) => String(h) === String(next.head))) {
      if (request.head !== undefined) throw new Error(`no head ${request.head} in ${v.id} layer ${next.layer}`);
      next.head = 0;
    }
    next.head = parseHead(next.head);
    if (request.word !== undefined) next.word = request.word;
    next.word = Math.max(0, Math.min(next.word, v.query_tokens.length - 1));
    Object.assign(state, next);
    render();
    const hash = Object.entries(current()).map(([k, value]) => `${k}=${encodeURIComponent(value)}`);
    try {
      history.replaceState(null, "", "#" + hash.join("&")); // a link or a reload keeps the view
    } catch (error) {
      // a page without an address of its own (an <iframe srcdoc> in a notebook) has no hash
    }
    return current();
  }

  /** The view named in the address, e.g. explore.html#input=1&view=cross&layer=2&head=mean */
  function fromHash() {
    const request = {};
    for (const part of location.hash.slice(1).split("&")) {
      const [key, value] = part.split("=").map(decodeURIComponent);
      if (!["input", "view", "layer", "head", "word"].includes(key) || value === undefined) continue;
      request[key] = /^\d+$/.test(value) ? Number(value) : value;
    }
    try {
      show(request);
    } catch (error) {
      console.warn(`ignoring the address's view: ${error.message}`);
      render();
    }
  }

  function current() {
    const v = view();
    return { input: state.input, view: v.id, layer: state.layer, head: state.head, word: state.word };
  }

  function render() {
    renderControls(); renderTokens(); renderMatrix(); renderGrid(); renderSummaries(); renderImage();
    renderFrames();
    setHover(hover);
  }

  // ---------------------------------------------------------------- wiring

  $("input-select").addEventListener("change", (e) => show({ input: Number(e.target.value) }));
  $("view-select").addEventListener("change", (e) => show({ view: Number(e.target.value) }));
  $("layer-select").addEventListener("change", (e) => show({ layer: Number(e.target.value) }));
  $("head-select").addEventListener("change", (e) => show({ head: parseHead(e.target.value) }));
  $("metric-select").addEventListener("change", renderSummaries);
  $("matrix").addEventListener("mouseover", onMatrixHover);
  $("overlay").addEventListener("click", pickRegion);
  $("overlay").addEventListener("mousemove", pickRegion);
  $("matrix").addEventListener("mouseleave", () => { setHover(null); $("hover-info").textContent = ""; });
  $("tokens").addEventListener("mouseover", (e) => {
    const d = e.target.dataset;
    if (d.side) setHover({ side: d.side, index: Number(d.index) });
  });
  $("tokens").addEventListener("mouseleave", () => setHover(null));
  for (const button of document.querySelectorAll("button[data-save]")) {
    button.addEventListener("click", () => savePng(button.dataset.save));
  }
  document.addEventListener("keydown", (e) => {
    if (["SELECT", "INPUT", "TEXTAREA"].includes(e.target.tagName)) return;
    const step = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -1, ArrowDown: 1 }[e.key];
    if (!step) return;
    e.preventDefault();
    const across = e.key === "ArrowLeft" || e.key === "ArrowRight";
    const wrap = (i, n) => (i + n) % n;
    if (across && (input().image || (input().frames && !multiHead()))) {
      show({ word: wrap(state.word + step, view().query_tokens.length) });
    } else if (across && multiHead()) {
      const heads = headChoices(view(), state.layer);
      const at = heads.findIndex((h) => String(h) === String(state.head));
      show({ head: heads[wrap(at + step, heads.length)] });
    } else if (multiHead()) {
      show({ layer: wrap(state.layer + step, view().layers.length) });
    } else {
      show({ view: wrap(state.view + step, input().views.length) });
    }
  });

  const pending = DATA.inputs.map((x, i) => x.image ? new Promise((resolve) => {
    const img = new Image();
    img.onload = img.onerror = () => resolve();
    img.src = x.image.png;
    images[i] = img;
  }) : Promise.resolve());

  window.qkv = { show, current, png, savePng, data: DATA };
  fromHash();
  Promise.all(pending).then(() => {
    renderImage();
    performance.mark("qkv-ready"); // how long opening took: benchmarks/explore_page.py
    document.body.dataset.ready = "true";
  });
})();
