/* script/grid.js: the small multiples (every layer and head of a view, or every view of an
   input) and the hover highlights that run through the matrix, the chips and the grid. */

let smalls = []; // per small canvas: {box, canvas, image, data, view, layer, head}
let hover = null; // {side: "source" | "target", index}

function gridItems(x, s) {
  if (!KIND.multiHead) return x.views.map((v, i) => ({ view: i, layer: 0, head: 0, caption: v.title }));
  const v = x.views[s.view], items = [];
  // a compact view's grid: its heads' thumbnails (its mean and rollout take every head)
  const shown = (l) => headChoices(v, l).filter((h) => !v.compact || typeof h === "number");
  v.layers.forEach((_, l) => shown(l).forEach((h) => items.push({
    view: s.view, layer: l, head: h,
    caption: `L${l} ${h === "mean" ? "mean" : h === "rollout" ? "rollout" : "H" + h}`,
  })));
  return items;
}

function gridColumns(x, s, count) {
  const v = x.views[s.view];
  return KIND.multiHead ? (v.compact ? v.layers[0].compact.heads : headChoices(v, 0).length) : Math.min(4, count);
}

let gridDrawn = null; // what the grid holds: "input/view"; a head or layer change redraws less

function renderGrid(x, v, s) {
  const drawnFor = `${s.input}/${s.view}`;
  if (gridDrawn === drawnFor) { drawSmalls(s); return; }
  gridDrawn = drawnFor;
  const items = gridItems(x, s), grid = $("grid");
  grid.style.gridTemplateColumns = `repeat(${gridColumns(x, s, items.length)}, max-content)`;
  $("grid-title").textContent = KIND.multiHead ? `${v.title}: every layer and head` : KIND.gridTitle;
  const size = KIND.multiHead ? 64 : 120; // fixed: the grid never grows with the input's length
  smalls = items.map((item) => {
    const w = x.views[item.view], compact = w.layers[item.layer].compact;
    const m = compact ? null : matrixOf(s.input, w, item.layer, item.head); // compact: thumbnails
    const rows = compact ? compact.length : m.length, cols = compact ? compact.length : m[0].length;
    const box = document.createElement("div");
    box.className = "small";
    Object.assign(box.dataset, { view: item.view, layer: item.layer, head: item.head });
    const canvas = document.createElement("canvas");
    const aspect = rows / cols;
    canvas.width = size; canvas.height = Math.max(8, Math.round(size * Math.min(2, aspect)));
    const caption = document.createElement("span");
    caption.textContent = item.caption;
    box.append(canvas, caption);
    if (!KIND.multiHead && w.output !== undefined) {
      const text = document.createElement("span");
      text.className = "stat"; text.textContent = short(w.output || "(empty)", 28); text.title = w.output;
      box.append(text);
    }
    if (KIND.multiHead) {
      const stat = document.createElement("span");
      stat.className = "stat";
      const summary = summaryOf(w, item.layer, item.head);
      stat.textContent = `H ${summary.entropy}` + (summary.diagonal !== null ? ` d ${summary.diagonal}` : "");
      box.append(stat);
    }
    box.addEventListener("click", () => show({ view: item.view, layer: item.layer, head: parseHead(item.head) }));
    const image = compact ? thumbCanvas(compact, item.head) : pixels(m);
    return { ...item, box, canvas, image, rows, cols, data: w };
  });
  grid.replaceChildren(...smalls.map((small) => small.box));
  drawSmalls(s);
}

function drawSmalls(s) {
  for (const small of smalls) {
    const ctx = small.canvas.getContext("2d"), w = small.canvas.width, h = small.canvas.height;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(small.image, 0, 0, w, h);
    if (hover) band(ctx, small.data, small.rows, small.cols, w, h);
    small.box.classList.toggle("current", small.view === s.view && small.layer === s.layer &&
      String(small.head) === String(s.head));
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

// ---------------------------------------------------------------- hover

function highlightColumn(j) {
  drawn.colLabels[j].classList.add("hl");
  for (const c of drawn.colCells[j]) c.classList.add("hl");
}

function setHover(next) {
  hover = next;
  for (const el of document.querySelectorAll(".matrix .hl, .chip.hl")) el.classList.remove("hl");
  if (hover) {
    const v = view();
    if (v.query_side === hover.side && drawn.rowCells[hover.index]) {
      drawn.rowLabels[hover.index].classList.add("hl");
      for (const c of drawn.rowCells[hover.index]) c.classList.add("hl");
    }
    if (v.key_side === hover.side && drawn.colCells[hover.index]) highlightColumn(hover.index);
    for (const c of document.querySelectorAll(`.chip[data-side="${hover.side}"][data-index="${hover.index}"]`)) {
      c.classList.add("hl");
    }
  }
  drawSmalls(state);
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
    if (v.key_side !== v.query_side || i !== j) highlightColumn(j);
    $("hover-info").textContent = `${v.query_tokens[i]} \u2192 ${v.key_tokens[j]}: ${el.dataset.weight}`;
  }
}
