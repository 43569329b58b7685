/* script/kinds.js: what the page shows for its kind of model.  The adapter that built the
   data declares it (qkv.explore.registry.PageKind, as the data's model.page): the header's
   line (info), whether its views have layers and heads (multiHead), how the token rows are
   labelled (sourceRow, targetRow, classifier), what a query of a picture is called (term),
   what the small multiples are titled (gridTitle), whether the pointer picks a region
   (pickRegions) and which per-head summaries the summary table offers beside those every
   page offers (metrics, added to METRICS).  So a new family needs no entry here. */

const METRICS = {
  entropy: "entropy (bits)", diagonal: "weight on the diagonal",
  previous: "weight on the previous token", first: "weight on the first token",
};

function kindOf(model) {
  if (!model.page) throw new Error(`the data declares no page for models of kind "${model.kind}" (model.page)`);
  return { ...model.page, metrics: { ...METRICS, ...model.page.metrics } };
}
