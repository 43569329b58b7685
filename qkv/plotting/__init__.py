"""Pictures of attention: alignment heatmaps and image overlays (matplotlib, files only)."""

from .heatmaps import plot_alignment, plot_alignment_grid, plot_image_attention

__all__ = ["plot_alignment", "plot_alignment_grid", "plot_image_attention"]
