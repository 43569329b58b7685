/* script/live/page.js: the live bar and window.qkvLive.  What the learner types runs through
   the family's forward pass (LIVE[DATA.live.family], script/live/<family>.js); its result
   becomes one more input of the page, in the page's own schema, so every view (heads,
   layers, rollout, neuron view) draws it as it draws the inputs written in Python. */

let liveLoaded = null; // the model, decoded from DATA.live on first use

function liveFamily() {
  const family = LIVE[DATA.live.family];
  if (!family) throw new Error(`the page has no live forward pass for ${DATA.live.family}`);
  return family;
}

function liveRun(text, options = {}) {
  if (typeof text !== "string" || !text.length) throw new Error("qkvLive.run takes the text to run");
  liveLoaded = liveLoaded || liveModel(DATA.live);
  return liveFamily().run(liveLoaded, text, options);
}

/** Runs text, adds the result to the page's inputs and shows it; returns the result. */
function liveShow(text, options = {}) {
  const started = performance.now();
  const result = liveRun(text, options);
  const entry = liveFamily().page(result, text, options);
  entry.live = true;
  DATA.inputs.push(entry);
  const milliseconds = performance.now() - started;
  show({ input: DATA.inputs.length - 1, view: state.view < entry.views.length ? state.view : 0 });
  $("live-note").textContent = `computed in this page in ${milliseconds.toFixed(0)} ms` +
    (entry.output !== undefined ? ` \u2192 ${entry.output || "(empty)"}` : "");
  return result;
}

/** The options the live bar's fields give (a language model's generation). */
function liveOptions() {
  const options = {};
  for (const field of document.querySelectorAll("#live-bar [data-option]")) {
    if (field.value !== "") options[field.dataset.option] = Number(field.value);
  }
  return options;
}

function liveSubmit(event) {
  event.preventDefault();
  try {
    liveShow($("live-text").value, liveOptions());
  } catch (error) {
    $("live-note").textContent = error.message;
  }
}

$("live-bar").classList.remove("hidden");
$("live-form").addEventListener("submit", liveSubmit);
$("live-text").placeholder = liveFamily().placeholder || "type your own input, then Enter";
for (const field of document.querySelectorAll("#live-bar [data-option]")) {
  field.closest("label").classList.toggle("hidden", !(liveFamily().options || []).includes(field.dataset.option));
}

window.qkvLive = {
  /** The forward pass alone: {ids, tokens, output, attention, logits, ...} (docs/explorer.md). */
  run: (text, options) => liveRun(text, options),
  /** The same, added to the page as an input and shown. */
  show: (text, options) => liveShow(text, options),
  family: DATA.live.family,
  config: DATA.live.config,
  /** "wasm" where the products run in WebAssembly, "js" where in JavaScript (after a run). */
  kernel: () => (KERNEL && kernelOn ? "wasm" : "js"),
  /** Turn the WebAssembly products off (false) or on again, to compare the two. */
  useKernel: (on) => { kernelOn = Boolean(on); },
};
