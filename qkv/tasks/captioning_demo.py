"""``qkv demo captioning``: Show, Attend and Tell on the generated scenes, on a CPU.

Trains a captioner on the shapes scenes (coloured circles, squares and triangles with
captions such as "a small red circle left of a large blue square"), prints a few test
captions with BLEU-4, exact match and how much of each object word's attention falls on
that object, and writes one attention strip per example scene.
"""

from __future__ import annotations

from pathlib import Path

from ..training import TrainConfig
from .captioner_eval import evaluate_captioning
from .captioning import SCENES, CaptioningSetup, caption_examples, train_captioning
from .demo import DemoRun, demo_train_config
from .image_captioner import ImageCaptioner, plot_caption_attention
from .presets import recipe_for

__all__ = ["DEMO_CAPTIONING_SETUP", "DEMO_CAPTIONING_CONFIG", "demo_captioning"]

#: A narrower captioner than the default, so a few minutes of CPU teach it the scenes.
#: Without the doubly stochastic regulariser (lambda = 0): it asks every region to be looked
#: at about once per caption, while a scene's named object covers under a tenth of the
#: image; measured at 1200 steps, lambda = 0 put 3.8x the uniform share of attention on
#: the named object, lambda = 0.1 3.5x and lambda = 1 1.9x, at about the same BLEU.
DEMO_CAPTIONING_SETUP = CaptioningSetup(
    data=SCENES,
    image_size=64,
    min_count=1,
    valid_size=100,
    feature_dim=64,
    embedding_dim=64,
    hidden_dim=128,
    attention_dim=64,
    doubly_stochastic=0.0,
    dropout=0.0,
)

#: Sized so that training takes at most 4 minutes on a 2-core laptop CPU.
DEMO_CAPTIONING_CONFIG = demo_train_config(
    recipe_for("captioner", "default"), max_minutes=4.0, log_every=25
)

#: Test scenes whose captions and attention strips the demo shows.
EXAMPLES = 4
#: Test scenes scored at the end (greedy search).
TEST_IMAGES = 200


def demo_captioning(
    out_dir: str | Path = "qkv-demo-captioning",
    *,
    setup: CaptioningSetup = DEMO_CAPTIONING_SETUP,
    config: TrainConfig = DEMO_CAPTIONING_CONFIG,
    say=print,
) -> dict:
    """Train, evaluate and plot; returns the test scores.  ``say`` prints progress lines.
    The caller sets the CPU threads (``qkv demo`` gives it one: ``DEMO_THREADS``)."""
    demo = DemoRun(out_dir, say)
    result = demo.train(
        "qkv demo captioning: training a captioner on generated scenes",
        lambda: train_captioning(setup, config, demo.out_dir),
    )
    captioner = ImageCaptioner.from_checkpoint(demo.out_dir)
    test = caption_examples(SCENES, "test", image_size=setup.image_size, size=TEST_IMAGES)
    scores, captions = evaluate_captioning(captioner, test, beam=1)
    say(
        f"test scenes: BLEU-4 {scores.bleu4:.1f}, exact caption {scores.exact_match:.1%} "
        f"({scores.num_images} images, greedy)"
    )
    if scores.grounding is not None:
        say(
            f"attention on the named object: {scores.grounding:.1%} of the mass, against "
            f"{scores.grounding_uniform:.1%} for a uniform map ({scores.grounded_words} words)"
        )
    plots = demo.out_dir / "attention"
    grid = captioner.model.config.grid
    for index, (example, caption) in enumerate(zip(test[:EXAMPLES], captions, strict=False)):
        say(f"  scene {index}: {caption.text}   (references: {' | '.join(example.raw)})")
        if captioner.has_attention:
            (with_attention,) = captioner.caption([example.image], need_attention=True)
            path = plots / f"scene-{index}.png"
            plot_caption_attention(example.image, with_attention, path, grid=grid)
    if captioner.has_attention:
        demo.finish(f"attention strips: {plots}/scene-*.png")
    return {
        "bleu4": scores.bleu4,
        "exact_match": scores.exact_match,
        "grounding": scores.grounding,
        "grounding_uniform": scores.grounding_uniform,
        "steps": result.steps,
    }
