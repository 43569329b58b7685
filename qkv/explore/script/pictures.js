/* script/pictures.js: a captioner's or image classifier's picture with each word's (query's)
   attention over the regions, and a clip's frames with each frame's weight. */

const images = []; // per input with a picture: a decoded <img>

/** The picture dimmed where the word's attention is low: the region grid drawn one pixel
    per region, then upsampled with smoothing (bilinear) over the image.  A model with
    layers and heads draws the layer and head shown; its keys may start with tokens that are
    no region (a vision Transformer's [CLS]: image.offset of them), left out of the picture. */
function drawOverlay(canvas, x, v, s, word) {
  const [gh, gw] = x.image.grid, offset = x.image.offset || 0;
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  const img = images[s.input];
  ctx.fillStyle = themed("--bg"); ctx.fillRect(0, 0, w, h);
  if (!img || !img.complete) return;
  ctx.imageSmoothingEnabled = true; ctx.imageSmoothingQuality = "high";
  ctx.drawImage(img, 0, 0, w, h);
  const m = KIND.multiHead ? matrixOf(s.input, v, s.layer, s.head) : v.layers[0].heads[0];
  if (!m) return; // a long page's mean or rollout on its way
  const values = m[word].slice(offset, offset + gh * gw);
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
    const region = word - offset;
    if (region >= 0) ctx.strokeRect(((region % gw) * w) / gw, (Math.floor(region / gw) * h) / gh, w / gw, h / gh);
  }
}

/** An image classifier's feature-map view or a vision Transformer's self-attention: one
    query per region (after the image.offset leading tokens), picked on the picture. */
const pickable = (x, v) => x.image && (KIND.classifier || KIND.pickRegions) &&
  v.query_tokens.length === (x.image.offset || 0) + x.image.grid[0] * x.image.grid[1];

function pickRegion(event) {
  const x = input(), v = view();
  if (!pickable(x, v)) return;
  const [gh, gw] = x.image.grid, box = event.target.getBoundingClientRect();
  const col = Math.min(gw - 1, Math.max(0, Math.floor(((event.clientX - box.left) / box.width) * gw)));
  const row = Math.min(gh - 1, Math.max(0, Math.floor(((event.clientY - box.top) / box.height) * gh)));
  const word = (x.image.offset || 0) + row * gw + col;
  if (word !== state.word) show({ word });
}

function renderImage(x, v, s) {
  $("image-panel").classList.toggle("hidden", !x.image);
  if (!x.image) return;
  const words = v.query_tokens;
  const gate = v.gates ? ` \u00b7 \u03b2 = ${v.gates[s.word]}` : "";
  const verdict = KIND.classifier ? ` \u00b7 predicted ${x.output}` + (x.truth_tokens ? `, true ${x.truth_tokens[0]}` : "") : "";
  $("word-title").textContent = `${KIND.term} ${s.word + 1}/${words.length}: \u201c${words[s.word]}\u201d${gate}${verdict}`;
  drawOverlay($("overlay"), x, v, s, s.word);
  $("strip-title").textContent = `every ${KIND.term}`;
  $("strip").replaceChildren(...words.map((word, t) => {
    const frame = document.createElement("div");
    frame.className = "frame" + (t === s.word ? " current" : "");
    const canvas = document.createElement("canvas");
    canvas.width = 96; canvas.height = 96;
    drawOverlay(canvas, x, v, s, t);
    const label = document.createElement("span");
    label.textContent = word + (v.gates ? ` (\u03b2 ${v.gates[t].toFixed(2)})` : "");
    frame.append(canvas, label);
    frame.addEventListener("click", () => show({ word: t }));
    return frame;
  }));
}

/** Each frame with a bar of its weight: the pooling weights of a clip classifier, or for a
    frame tagger the row of the selected (query) frame in the matrix shown. */
function renderFrames(x, v, s) {
  $("frames-panel").classList.toggle("hidden", !x.frames);
  if (!x.frames) return;
  const m = matrixOf(s.input, v, s.layer, s.head);
  const query = Math.min(s.word, m.length - 1), row = m[query], top = Math.max(1, ...row);
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
    const level = document.createElement("div");
    level.style.height = `${(100 * row[t]) / top}%`;
    level.style.background = css(colour(row[t] / top));
    bar.append(level);
    const label = document.createElement("span");
    const truthHere = x.truth_tokens && x.truth_tokens.length === x.frames.length ? ` (${x.truth_tokens[t]})` : "";
    label.textContent = `${v.key_tokens[t]}${truthHere} ${(row[t] / SCALE).toFixed(3)}`;
    box.append(img, bar, label);
    if (m.length > 1) box.addEventListener("click", () => show({ word: t }));
    return box;
  }));
}
