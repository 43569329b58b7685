/* script/export.js: every panel as a PNG (qkv.png(panel): its data: URL) and as an SVG
   (qkv.svg(panel): its text; the head view's cells and labels are vector shapes and text,
   the small canvases of the grid, picture and strip are embedded as PNG images); the
   panel's buttons download them. */

const PANELS = ["head", "grid", "image", "strip", "neuron"];

function headCanvas(x, v, s, bg, fg, font) {
  const out = document.createElement("canvas"), ctx = out.getContext("2d");
  const m = matrixOf(s.input, v, s.layer, s.head), top = maxOf(m);
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

/** The small canvases of a panel, laid out in a grid with their captions. */
function tiledCanvas(panel, x, s, bg, fg, font) {
  const out = document.createElement("canvas"), ctx = out.getContext("2d");
  const sources = panel === "grid" ? smalls.map((small) => [small.canvas, small.box.textContent])
    : panel === "image" ? [[$("overlay"), $("word-title").textContent]]
      : [...document.querySelectorAll("#strip .frame")].map((f) => [f.querySelector("canvas"), f.textContent]);
  const columns = panel === "grid" ? Math.max(1, Math.min(sources.length, gridColumns(x, s, 4)))
    : panel === "strip" ? sources.length : 1;
  const scale = panel === "strip" ? 1.5 : panel === "grid" ? 1.5 : 1;
  const cw = Math.max(...sources.map(([c]) => c.width)) * scale + 8;
  const ch = Math.max(...sources.map(([c]) => c.height)) * scale + 22;
  out.width = Math.max(columns * cw, 240); out.height = Math.ceil(sources.length / columns) * ch + 24;
  ctx.fillStyle = bg; ctx.fillRect(0, 0, out.width, out.height);
  ctx.font = font; ctx.fillStyle = fg;
  ctx.fillText(panel === "grid" ? $("grid-title").textContent : x.output, 4, 16);
  sources.forEach(([canvas, caption], k) => {
    const left = (k % columns) * cw + 4, y = Math.floor(k / columns) * ch + 24;
    ctx.imageSmoothingEnabled = panel !== "grid";
    ctx.drawImage(canvas, left, y, canvas.width * scale, canvas.height * scale);
    ctx.fillStyle = fg; ctx.fillText(caption, left, y + canvas.height * scale + 14, cw - 6);
  });
  return out;
}

/** The neuron view's shapes on a canvas. */
function neuronCanvas(bg, fg, font) {
  const { width, height, shapes } = neuronShapes(view(), fg);
  const out = document.createElement("canvas"), ctx = out.getContext("2d");
  out.width = width; out.height = height;
  ctx.fillStyle = bg; ctx.fillRect(0, 0, width, height);
  ctx.font = font;
  for (const shape of shapes) {
    ctx.fillStyle = shape.fill;
    if (shape.text !== undefined) ctx.fillText(shape.text, shape.x, shape.y);
    else ctx.fillRect(shape.x, shape.y, shape.w, shape.h);
  }
  return out;
}

/** The neuron view's shapes as SVG: every strip cell a rect, every number text. */
function neuronSvg(bg, fg) {
  const { width, height, shapes } = neuronShapes(view(), fg);
  const body = shapes.map((shape) => shape.text !== undefined
    ? `<text x="${shape.x}" y="${shape.y}" fill="${shape.fill}" xml:space="preserve">${escapeXml(shape.text)}</text>`
    : `<rect x="${shape.x}" y="${shape.y}" width="${shape.w}" height="${shape.h}" fill="${shape.fill}"/>`);
  return svgDocument(width, height, bg, body);
}

function panelCanvas(panel) {
  const bg = themed("--bg"), fg = themed("--fg"), font = "12px ui-monospace, monospace";
  if (panel === "head") return headCanvas(input(), view(), state, bg, fg, font);
  if (panel === "neuron") return neuronCanvas(bg, fg, font);
  return tiledCanvas(panel, input(), state, bg, fg, font);
}

function exportable(panel) {
  if (!PANELS.includes(panel)) throw new Error(`no panel "${panel}"`);
  if (panel === "head" && drawn.matrix === null) throw new Error("the matrix is still being computed");
  if (panel === "neuron" && neuronState === null) throw new Error("the neuron view shows no steps here");
}

function png(panel) {
  exportable(panel);
  return panelCanvas(panel).toDataURL("image/png");
}

function savePng(panel) {
  const link = document.createElement("a");
  link.href = png(panel);
  link.download = `qkv-${DATA.model.kind}-input${state.input + 1}-${panel}.png`;
  document.body.append(link); link.click(); link.remove();
}

// ---------------------------------------------------------------- SVG

const escapeXml = (text) => String(text).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);

function svgDocument(width, height, bg, body) {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="ui-monospace, monospace" font-size="12">` +
    `<rect width="100%" height="100%" fill="${bg}"/>${body.join("")}</svg>`;
}

/** The head view: one rect per weight (each with its weight as a title), labels as text. */
function headSvg(x, v, s, bg, fg) {
  const m = matrixOf(s.input, v, s.layer, s.head), top = maxOf(m);
  const rows = m.length, cols = m[0].length;
  const cell = Math.max(4, Math.min(18, Math.floor(1600 / Math.max(rows, cols))));
  const every = Math.ceil(12 / cell), labelW = 8 + 7.5 * Math.max(...v.query_tokens.map((t) => t.length));
  const labelH = 8 + 7.5 * Math.max(...v.key_tokens.map((t) => t.length));
  const left = labelW, upper = 24 + labelH, body = [];
  body.push(`<text x="4" y="16" fill="${fg}">${escapeXml($("head-title").textContent)}</text>`);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
    body.push(`<rect x="${left + j * cell}" y="${upper + i * cell}" width="${cell}" height="${cell}" ` +
      `fill="${css(colour(m[i][j] / top))}"><title>${m[i][j] / SCALE}</title></rect>`);
  }
  v.query_tokens.forEach((t, i) => {
    if (i % every === 0) body.push(`<text x="4" y="${upper + (i + 0.5) * cell}" dominant-baseline="middle" fill="${fg}" xml:space="preserve">${escapeXml(t)}</text>`);
  });
  v.key_tokens.forEach((t, j) => {
    if (j % every) return;
    const cx = left + (j + 0.5) * cell, cy = upper - 4;
    body.push(`<text transform="translate(${cx},${cy}) rotate(-90)" dominant-baseline="middle" fill="${fg}" xml:space="preserve">${escapeXml(t)}</text>`);
  });
  return svgDocument(left + cols * cell + 10, upper + rows * cell + 10, bg, body);
}

function svg(panel) {
  exportable(panel);
  const bg = themed("--bg"), fg = themed("--fg");
  const m = drawn.matrix; // a long input's head view: its PNG, embedded like the others
  if (panel === "head" && m.length * m[0].length <= DOM_CELLS) return headSvg(input(), view(), state, bg, fg);
  if (panel === "neuron") return neuronSvg(bg, fg);
  const picture = panelCanvas(panel); // the same layout as the PNG, as one embedded image
  const body = [`<image width="${picture.width}" height="${picture.height}" href="${picture.toDataURL("image/png")}"/>`];
  return svgDocument(picture.width, picture.height, bg, body);
}

function saveSvg(panel) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([svg(panel)], { type: "image/svg+xml" }));
  link.download = `qkv-${DATA.model.kind}-input${state.input + 1}-${panel}.svg`;
  document.body.append(link); link.click(); link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
