"""Pictures of attention and its effect: alignment heatmaps, image overlays, BLEU curves
(matplotlib, files only)."""

from .curves import plot_bleu_by_length, plot_training_log
from .figures import save_figure
from .frames import plot_frame_attention
from .heatmaps import plot_alignment, plot_alignment_grid, plot_image_attention

__all__ = [
    "plot_alignment",
    "plot_alignment_grid",
    "plot_image_attention",
    "plot_bleu_by_length",
    "plot_training_log",
    "plot_frame_attention",
    "save_figure",
]
