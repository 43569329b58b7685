/* script/main.js: the page's one state, qkv.show / qkv.current (which the address mirrors),
   and the wiring of the controls, the mouse and the arrow keys. */

const state = { input: 0, view: 0, layer: 0, head: 0, word: 0 };
const input = () => DATA.inputs[state.input];
const view = () => input().views[state.view];

/** The next state for a request ({input, view, layer, head, word}, each optional), checked. */
function nextState(request) {
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
  return next;
}

function show(request = {}) {
  Object.assign(state, nextState(request));
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
  return { input: state.input, view: view().id, layer: state.layer, head: state.head, word: state.word };
}

function render() {
  const x = input(), v = view();
  for (const draw of [renderControls, renderTokens, renderMatrix, renderGrid, renderSummaries,
    renderImage, renderFrames, renderNeuron]) draw(x, v, state);
  setHover(hover);
}

/** The arrow keys: across, the head (or the word of a picture or clip); down, the layer
    (or the hypothesis where there are no layers). */
function onKey(e) {
  if (["SELECT", "INPUT", "TEXTAREA"].includes(e.target.tagName)) return;
  const step = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -1, ArrowDown: 1 }[e.key];
  if (!step) return;
  e.preventDefault();
  const across = e.key === "ArrowLeft" || e.key === "ArrowRight";
  const wrap = (i, n) => (i + n) % n;
  if (across && (input().image || (input().frames && !KIND.multiHead))) {
    show({ word: wrap(state.word + step, view().query_tokens.length) });
  } else if (across && KIND.multiHead) {
    const heads = headChoices(view(), state.layer);
    const at = heads.findIndex((h) => String(h) === String(state.head));
    show({ head: heads[wrap(at + step, heads.length)] });
  } else if (KIND.multiHead) {
    show({ layer: wrap(state.layer + step, view().layers.length) });
  } else {
    show({ view: wrap(state.view + step, input().views.length) });
  }
}

$("input-select").addEventListener("change", (e) => show({ input: Number(e.target.value) }));
$("view-select").addEventListener("change", (e) => show({ view: Number(e.target.value) }));
$("layer-select").addEventListener("change", (e) => show({ layer: Number(e.target.value) }));
$("head-select").addEventListener("change", (e) => show({ head: parseHead(e.target.value) }));
$("metric-select").addEventListener("change", () => renderSummaries(input(), view(), state));
$("matrix").addEventListener("mouseover", onMatrixHover);
$("overlay").addEventListener("click", pickRegion);
$("overlay").addEventListener("mousemove", pickRegion);
$("matrix").addEventListener("mouseleave", () => { setHover(null); $("hover-info").textContent = ""; });
$("tokens").addEventListener("mouseover", (e) => {
  const d = e.target.dataset;
  if (d.side) setHover({ side: d.side, index: Number(d.index) });
});
$("tokens").addEventListener("mouseleave", () => setHover(null));
$("tokens").addEventListener("click", (e) => { // a token of the rows' side: the query
  const d = e.target.dataset;
  if (d.side && d.side === view().query_side && !input().image) show({ word: Number(d.index) });
});
for (const button of document.querySelectorAll("button[data-save]")) {
  button.addEventListener("click", () => savePng(button.dataset.save));
}
for (const button of document.querySelectorAll("button[data-save-svg]")) {
  button.addEventListener("click", () => saveSvg(button.dataset.saveSvg));
}
document.addEventListener("keydown", onKey);

const pending = DATA.inputs.map((x, i) => x.image ? new Promise((resolve) => {
  const img = new Image();
  img.onload = img.onerror = () => resolve();
  img.src = x.image.png;
  images[i] = img;
}) : Promise.resolve());

window.qkv = {
  show, current, png, savePng, svg, saveSvg, data: DATA,
  neuron: () => neuronState,
  pending: () => jobs.size, // a long input's mean or rollout being computed
  // the weight the large matrix draws at (i, j); null while a long page's mean or rollout is computed
  weight: (i, j) => (drawn.matrix ? drawn.matrix[i][j] / SCALE : null),
};
fromHash();
Promise.all(pending).then(() => {
  renderImage(input(), view(), state);
  performance.mark("qkv-ready"); // how long opening took: benchmarks/explore_page.py
  document.body.dataset.ready = "true";
});
