"""The block-mask picture: which blocks are full, partial or skipped."""

import numpy as np

from qkv.functional.block_mask import create_block_mask
from qkv.functional.patterns import sliding_window
from qkv.plotting.block_masks import block_kinds, plot_block_masks


def test_block_kinds_of_a_sliding_window_and_the_picture_is_written(tmp_path):
    mask = create_block_mask(sliding_window(4), None, None, 12, 12, BLOCK_SIZE=4)
    # window 4, blocks of 4: the diagonal blocks are partial (causal inside), the blocks
    # just below partial (the window's far edge), everything else skipped
    assert np.array_equal(block_kinds(mask), [[1, 0, 0], [1, 1, 0], [0, 1, 1]])
    path = plot_block_masks({"window": mask}, tmp_path / "masks.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
