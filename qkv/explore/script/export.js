/* script/export.js: every panel as a PNG (qkv.png(panel) gives its data: URL; the panel's
   button downloads it). */

const PANELS = ["head", "grid", "image", "strip"];

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

function panelCanvas(panel) {
  const bg = themed("--bg"), fg = themed("--fg"), font = "12px ui-monospace, monospace";
  if (panel === "head") return headCanvas(input(), view(), state, bg, fg, font);
  return tiledCanvas(panel, input(), state, bg, fg, font);
}

function png(panel) {
  if (!PANELS.includes(panel)) throw new Error(`no panel "${panel}"`);
  return panelCanvas(panel).toDataURL("image/png");
}

function savePng(panel) {
  const link = document.createElement("a");
  link.href = png(panel);
  link.download = `qkv-${DATA.model.kind}-input${state.input + 1}-${panel}.png`;
  document.body.append(link); link.click(); link.remove();
}
