"""attention-gym's own mask and score functions (the ``attn-gym`` package, imported as it
is) against qkv.flex_attention, forward and backward, with block masks made by PyTorch's
create_block_mask, qkv's, and attention-gym's own from_kv_blocks builders, each against a
float64 dense reference: PyTorch's create_mask for the mask, and the score function
evaluated one element at a time under vmap (PyTorch's semantics) for the scores."""

import math
import warnings

import pytest
import torch
from torch.nn.attention import flex_attention as torch_flex

from qkv.functional.flex import create_block_mask, flex_attention

masks = pytest.importorskip("attn_gym.masks", reason="attn-gym is a test dependency")
mods = pytest.importorskip("attn_gym.mods", reason="attn-gym is a test dependency")
from attn_gym.masks.causal import create_causal_block_mask_fast  # noqa: E402
from attn_gym.masks.document_mask import length_to_offsets  # noqa: E402
from attn_gym.mods.graphormer import shortest_path_edge_types  # noqa: E402

warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")

B, H, D = 1, 2, 8


def elementwise(score_mod):
    """score_mod over a dense (B, H, Tq, Tk) grid, one element per call (vmap four times)."""
    fn = score_mod
    for dims in ((0, None, None, None, 0), (0, None, None, 0, None), (0, None, 0, None, None)):
        fn = torch.vmap(fn, in_dims=dims)
    return torch.vmap(fn, in_dims=(0, 0, None, None, None))


def reference(q, k, v, mask_mod=None, score_mod=None):
    tq, tk = q.shape[2], k.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if score_mod is not None:
        index = [torch.arange(n, dtype=torch.int32) for n in (B, H, tq, tk)]
        scores = elementwise(score_mod)(scores, *index)
    if mask_mod is not None:
        scores = scores.masked_fill(
            ~torch_flex.create_mask(mask_mod, B, H, tq, tk, "cpu"), -math.inf
        )
    return scores.softmax(-1).nan_to_num(0.0) @ v


def check(block_mask, q, k, v, mask_mod=None, score_mod=None, learned=()):
    tensors = (q, k, v, *learned)
    grad = torch.randn(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    out = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    got = torch.autograd.grad((out * grad).sum(), tensors, retain_graph=True, allow_unused=True)
    want = reference(q, k, v, mask_mod, score_mod)
    expected = torch.autograd.grad((want * grad).sum(), tensors, allow_unused=True)
    torch.testing.assert_close(out, want)
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a is not None, f"input {n} got no gradient"
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b)


def inputs(tq, tk=None):
    gen = torch.Generator().manual_seed(tq)
    q = torch.randn(B, H, tq, D, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(B, H, tk or tq, D, generator=gen, dtype=torch.float64) for _ in "kv")
    return [t.requires_grad_() for t in (q, k, v)]


offsets = length_to_offsets([20, 37, 7, 32], "cpu")
MASKS = {
    "causal": (lambda: masks.causal_mask, 96, 96),
    "sliding_window": (lambda: masks.generate_sliding_window(21), 96, 96),
    "dilated_sliding_window": (lambda: masks.generate_dilated_sliding_window(24, 3), 96, 96),
    "prefix_lm": (lambda: masks.generate_prefix_lm_mask(30), 96, 96),
    "document": (lambda: masks.generate_doc_mask_mod(masks.causal_mask, offsets), 96, 96),
    "packed_causal_document": (
        lambda: masks.generate_packed_causal_doc_mask_mod(offsets),
        96,
        96,
    ),
    "global_sliding_window": (
        lambda: masks.generate_global_sliding_window(9, torch.arange(96) % 31 == 0),
        96,
        96,
    ),
    "natten": (lambda: masks.generate_natten(10, 8, 3, 3), 80, 80),
    "tiled_natten": (lambda: masks.generate_tiled_natten(8, 8, 3, 3, 2, 2), 64, 64),
    "morton_natten": (lambda: masks.generate_morton_natten(8, 8, 3, 5), 64, 64),
    "sta_2d": (lambda: masks.generate_sta_mask_mod_2d((8, 8), (4, 4), (2, 2)), 64, 64),
    "block_diffusion": (lambda: masks.generate_block_diffusion_mask(48, 8), 96, 96),
    "shared_prefix": (
        lambda: masks.generate_shared_prefix_mask_mod(offsets, torch.tensor([0, 0, 2, 2])),
        96,
        96,
    ),
    "batchify": (lambda: masks.batchify_mask_mod(masks.causal_mask, 24), 96, 96),
    "vision_cross_attention": (
        lambda: masks.generate_vision_cross_attention_mask_mod(
            torch.tensor([[0, 30], [20, 50], [45, 60]]), 16
        ),
        60,
        48,
    ),
    "jetspec_training": (lambda: masks.generate_jetspec_training_mask_mod(16, 8), 48, 64),
}


@pytest.mark.parametrize("name", MASKS)
def test_attention_gym_masks_with_pytorchs_and_qkvs_block_masks(name):
    make, tq, tk = MASKS[name]
    mask_mod = make()
    q, k, v = inputs(tq, tk)
    for block in (16, (32, 16)):
        for create in (torch_flex.create_block_mask, create_block_mask):
            block_mask = create(mask_mod, B, H, tq, tk, device="cpu", BLOCK_SIZE=block)
            check(block_mask, q, k, v, mask_mod=mask_mod)


def test_attention_gym_block_masks_built_with_from_kv_blocks():
    """Its fast causal builder and its VSA top-k tile mask make PyTorch BlockMasks
    straight from block lists (no mask_mod over the grid): qkv reads those lists."""
    q, k, v = inputs(100)
    for separate in (True, False):
        fast = create_causal_block_mask_fast(
            B, H, 100, 100, torch.device("cpu"), block_size=32, separate_full_blocks=separate
        )
        check(fast, q, k, v, mask_mod=masks.causal_mask)
    gen = torch.Generator().manual_seed(3)
    tiles, tile = 4, 16
    top = torch.stack(
        [torch.randperm(tiles, generator=gen)[:2] for _ in range(B * H * tiles)]
    ).view(B, H, tiles, 2)
    vsa = masks.create_vsa_block_mask(top, tile, tiles)
    q, k, v = inputs(tiles * tile)
    chosen = torch.zeros(B, H, tiles, tiles, dtype=torch.bool).scatter_(-1, top, True)
    dense = chosen.repeat_interleave(tile, 2).repeat_interleave(tile, 3)
    check(vsa, q, k, v, mask_mod=lambda b, h, i, j: dense[b, h, i, j])


def test_attention_gym_score_mods_forward_and_backward_with_their_learned_tables():
    q, k, v = inputs(64)
    window = masks.generate_sliding_window(40)
    block_mask = torch_flex.create_block_mask(window, B, H, 64, 64, "cpu", BLOCK_SIZE=16)
    for score_mod in (
        mods.generate_alibi_bias(H),
        mods.generate_tanh_softcap(3),
        mods.generate_sandwich_bias(H, 64, d_bar=16),
        mods.generate_activation_score_mod(),
    ):
        check(block_mask, q, k, v, mask_mod=window, score_mod=score_mod)
    # Graphormer on a ring of 64 nodes with chords: learned (head, distance) and
    # (head, hop, edge type) tables, each with its gradient
    adjacency = torch.zeros(B, 64, 64, dtype=torch.bool)
    ring = torch.arange(64)
    adjacency[:, ring, (ring + 1) % 64] = adjacency[:, (ring + 1) % 64, ring] = True
    adjacency[:, ring[::8], (ring[::8] + 16) % 64] = True
    distances = mods.shortest_path_distances(adjacency, 6)
    spatial = (0.3 * torch.randn(H, 8, dtype=torch.float64)).requires_grad_()
    check(None, q, k, v, score_mod=mods.generate_graphormer_spatial_bias(spatial, distances),
          learned=(spatial,))  # fmt: skip
    edge_types = torch.randint(0, 3, (B, 64, 64), generator=torch.Generator().manual_seed(4))
    path_types, path_lengths = shortest_path_edge_types(adjacency, edge_types, 3)
    edge_bias = (0.3 * torch.randn(H, 3, 3, dtype=torch.float64)).requires_grad_()
    edge_mod = mods.generate_graphormer_edge_bias(edge_bias, path_types, path_lengths)
    check(block_mask, q, k, v, mask_mod=window, score_mod=edge_mod, learned=(edge_bias,))
    # DeepSeek's MLA: a dot product of rotary parts inside the score_mod (vmap only)
    query_rope = (0.2 * torch.randn(B, H, 64, 4, dtype=torch.float64)).requires_grad_()
    key_rope = (0.2 * torch.randn(B, 1, 64, 4, dtype=torch.float64)).requires_grad_()
    mla = mods.generate_mla_rope_score_mod(query_rope, key_rope, num_heads=H)
    check(block_mask, q, k, v, mask_mod=window, score_mod=mla, learned=(query_rope, key_rope))
