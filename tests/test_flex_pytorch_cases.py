"""PyTorch's own FlexAttention test cases that need neither compile nor CUDA, re-expressed
against qkv.flex_attention (which also trains on the CPU: every case runs backward too),
each against a float64 dense reference: its score_mod zoo with grouped heads, a shared
key/value batch and uneven block sizes; BlockMask attributes, indexing, devices, block
lists and printing; lengths a mask was not made for; a captured per-head buffer."""

import math
import warnings

import pytest
import torch
from torch.nn.attention import flex_attention as torch_flex

from qkv.functional.block_mask import BlockListsError
from qkv.functional.flex import BlockMask, create_block_mask, flex_attention, noop_mask

warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


# -- the score functions PyTorch's suite runs every kernel configuration with --
def identity(score, b, h, m, n):
    return score


def times_two(score, b, h, m, n):
    return score * 2


def squared(score, b, h, m, n):
    return score * score


def causal_by_score(score, b, h, m, n):
    return torch.where(m >= n, score, -math.inf)


def inverse_causal_by_score(score, b, h, m, n):
    return torch.where(m <= n, score, -math.inf)


def relative(score, b, h, m, n):
    return score + (m - n)


def relative_causal(score, b, h, m, n):
    return torch.where(m >= n, score + (m - n), -math.inf)


def alibi8(score, b, h, m, n):
    return score + (n - m) * torch.exp2(-((h + 1) * 8.0 / 8))


def trig(score, b, h, m, n):
    return torch.sin(torch.cos(score)) + torch.tan(b)


def trig_branches(score, b, h, m, n):
    return torch.cos(score) * torch.sin(score) + torch.tan(b)


def causal(b, h, m, n):
    return m >= n


def inverse_causal(b, h, m, n):
    return m <= n


SCORE_MODS = {
    identity: noop_mask,
    times_two: noop_mask,
    squared: noop_mask,
    causal_by_score: causal,
    inverse_causal_by_score: inverse_causal,
    relative: noop_mask,
    relative_causal: causal,
    alibi8: noop_mask,
    trig: noop_mask,
    trig_branches: noop_mask,
}


def reference(q, k, v, score_mod, mask_mod):
    """Dense float64 attention: the score function on the whole grid (broadcast indices)."""
    batch, heads, tq, _ = q.shape
    k = k.expand(batch, -1, -1, -1).repeat_interleave(heads // k.shape[1], 1)
    v = v.expand(batch, -1, -1, -1).repeat_interleave(heads // v.shape[1], 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    b, h = torch.arange(batch).view(-1, 1, 1, 1), torch.arange(heads).view(1, -1, 1, 1)
    m, n = torch.arange(tq).view(-1, 1), torch.arange(k.shape[2])
    scores = score_mod(scores, b, h, m, n).expand_as(scores)
    scores = scores.masked_fill(~mask_mod(b, h, m, n), -math.inf)
    return scores.softmax(-1).nan_to_num(0.0) @ v


def run_case(score_mod, *, batch=2, heads=4, kv_batch=None, kv_heads=None, tq=96, tk=None,
             value_dim=None, block=32, mask_mod=None):  # fmt: skip
    """PyTorch's ``run_test``: the call in float64 against its dense reference, forward and
    backward (PyTorch runs only the forward on the CPU)."""
    tk, kv_batch, kv_heads = tk or tq, kv_batch or batch, kv_heads or heads
    mask_mod = mask_mod or SCORE_MODS.get(score_mod, noop_mask)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, tq, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(kv_batch, kv_heads, tk, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(kv_batch, kv_heads, tk, value_dim or 8, generator=gen, dtype=torch.float64)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    block_mask = create_block_mask(mask_mod, batch, heads, tq, tk, BLOCK_SIZE=block)
    out = flex_attention(q, k, v, score_mod, block_mask, enable_gqa=heads != kv_heads)
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad((out * grad).sum(), (q, k, v))
    want = reference(q, k, v, score_mod, mask_mod)
    expected = torch.autograd.grad((want * grad).sum(), (q, k, v))
    torch.testing.assert_close(out, want)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("score_mod", SCORE_MODS, ids=lambda f: f.__name__)
def test_builtin_score_mods(score_mod):
    run_case(score_mod)


@pytest.mark.parametrize("score_mod", [identity, relative_causal, alibi8], ids=lambda f: f.__name__)
@pytest.mark.parametrize("heads", [(4, 2), (4, 1)])
def test_grouped_query_attention(score_mod, heads):
    run_case(score_mod, heads=heads[0], kv_heads=heads[1])


@pytest.mark.parametrize("batches", [(3, 1), (4, 1)])
def test_one_key_value_batch_for_every_query_batch(batches):
    run_case(relative_causal, batch=batches[0], kv_batch=batches[1], heads=4, kv_heads=2)


@pytest.mark.parametrize("block", [32, 64, (32, 64), (64, 32)])
def test_block_sizes(block):
    run_case(relative_causal, block=block, tq=128)


@pytest.mark.parametrize("lengths", [(96, 160), (160, 96), (37, 101), (1, 77)])
def test_query_and_key_lengths_differ_and_value_width_differs(lengths):
    run_case(alibi8, tq=lengths[0], tk=lengths[1], value_dim=5, mask_mod=noop_mask)


def test_captured_head_offset_buffer_and_its_gradient():
    offset = torch.rand(4, dtype=torch.float64, requires_grad=True)

    def head_offset(score, b, h, m, n):
        return score * offset[h]

    run_case(head_offset)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 40, 8, generator=gen, dtype=torch.float64) for _ in "qkv")
    flex_attention(q, k, v, head_offset).sum().backward()
    ours = offset.grad.clone()
    offset.grad = None
    reference(q, k, v, head_offset, noop_mask).sum().backward()
    torch.testing.assert_close(ours, offset.grad)


def batch_offset_causal(offset):
    def mask_mod(b, h, q, kv):
        return (q + offset[b] * 128) >= kv

    return mask_mod


def test_block_mask_attributes_and_sparsity():
    mask = create_block_mask(batch_offset_causal(torch.zeros(8)), 4, 2, 2048, 2048)
    assert mask.shape == (4, 2, 2048, 2048) and mask.numel() == 4 * 2 * 2048 * 2048
    assert mask[0].shape == (1, 2, 2048, 2048) and mask[0, 0].shape == (1, 1, 2048, 2048)
    assert mask.sparsity() == mask[0].sparsity() == mask[1, 0].sparsity() == 46.875
    shifted = create_block_mask(batch_offset_causal(torch.arange(8)), 8, 1, 2048, 2048)
    assert shifted.sparsity() == 29.1015625
    assert shifted[0].sparsity() > shifted[1].sparsity() > shifted.sparsity()
    text = str(create_block_mask(causal, 1, 1, 2048, 2048))
    assert "sparsity=46.88%" in text and text.count("\n") >= 16


@pytest.mark.parametrize("block", [32, 64, 128, 256, (32, 64), (64, 32)])
def test_block_size_is_kept(block):
    mask = create_block_mask(noop_mask, 4, 2, 512, 512, BLOCK_SIZE=block)
    assert mask.BLOCK_SIZE == (block, block) if isinstance(block, int) else block
    assert mask.shape == (4, 2, 512, 512)


def test_indexing_batches_heads_and_query_blocks():
    mask = create_block_mask(batch_offset_causal(torch.zeros(8)), 4, 2, 512, 512)
    assert mask.kv_num_blocks.shape == (4, 2, 4) and mask.kv_indices.shape == (4, 2, 4, 4)
    assert mask[0:2, 1:2].kv_indices.shape == (2, 1, 4, 4)
    rows = torch.tensor([1], dtype=torch.int32)
    assert mask[0:2, 1:2, rows].kv_indices.shape == (2, 1, 1, 4)
    assert mask[-1].kv_indices.shape == (1, 2, 4, 4)
    with pytest.raises(IndexError, match="batch index 4"):
        mask[4]
    first = mask[:, :, torch.tensor([0])]
    torch.testing.assert_close(first.kv_num_blocks, mask.kv_num_blocks[:, :, [0]])
    torch.testing.assert_close(first.full_kv_indices, mask.full_kv_indices[:, :, [0], :])


def test_moving_between_devices():
    mask = create_block_mask(causal, 1, 1, 512, 512)
    moved = mask.to("meta")
    assert all(t.device.type == "meta" for t in moved.as_tuple() if isinstance(t, torch.Tensor))
    assert mask.kv_indices.is_cpu  # a copy: the mask itself stays
    again = mask.to(torch.device("cpu"))
    assert again is not mask and again.q_indices.is_cpu and again.mask_mod is causal


@pytest.mark.parametrize("with_full", [False, True])
def test_from_kv_blocks_transposes_the_lists(with_full):
    """One query block of 128 over two key blocks; -1 marks an unused list entry."""
    if with_full:  # key block 1 partial, key block 0 full
        lists = ([[[1]]], [[[[1, -1]]]], [[[1]]], [[[[0, -1]]]])
    else:  # both partial
        lists = ([[[2]]], [[[[0, 1]]]], None, None)
    lists = [None if x is None else torch.tensor(x, dtype=torch.int32) for x in lists]
    mask = BlockMask.from_kv_blocks(*lists)
    assert mask.BLOCK_SIZE == (128, 128) and mask.seq_lengths == (128, 256)
    assert BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=(64, 64)).BLOCK_SIZE == (64, 64)
    assert mask.q_indices.tolist() == [[[[0], [0]]]]
    if with_full:
        assert mask.q_num_blocks.tolist() == [[[0, 1]]]
        assert mask.full_q_num_blocks.tolist() == [[[1, 0]]]
        assert mask.full_q_indices.tolist() == [[[[0], [0]]]]
    else:
        assert mask.q_num_blocks.tolist() == [[[1, 1]]]
        assert mask.full_kv_num_blocks is None and mask.full_q_indices is None
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 1, 128, 8, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(1, 1, 256, 8, generator=gen, dtype=torch.float64) for _ in "kv")
    torch.testing.assert_close(
        flex_attention(q, k, v, block_mask=mask), reference(q, k, v, identity, noop_mask)
    )


def test_mismatched_full_lists_are_refused_as_pytorch():
    count, indices = torch.tensor([[[1]]], dtype=torch.int32), torch.tensor([[[[1, 0]]]]).int()
    for cls in (BlockMask, torch_flex.BlockMask):
        with pytest.raises(AssertionError):
            cls(
                seq_lengths=(1, 1), kv_num_blocks=count, kv_indices=indices,
                full_kv_num_blocks=count, full_kv_indices=None, q_num_blocks=count,
                q_indices=indices, full_q_num_blocks=None, full_q_indices=None,
            )  # fmt: skip
        with pytest.raises(AssertionError):
            cls(
                seq_lengths=(1, 1), kv_num_blocks=count, kv_indices=indices,
                full_kv_num_blocks=None, full_kv_indices=None, q_num_blocks=count,
                q_indices=indices, full_q_num_blocks=count, full_q_indices=None,
            )  # fmt: skip
    with pytest.raises(BlockListsError):
        BlockMask.from_kv_blocks(count, indices, count, None)


def test_a_mask_without_its_query_lists_still_trains():
    mask = create_block_mask(causal, 1, 1, 256, 256, BLOCK_SIZE=64)
    mask.q_num_blocks = mask.q_indices = mask.full_q_num_blocks = mask.full_q_indices = None
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 256, 8, generator=gen, requires_grad=True) for _ in "qkv")
    out = flex_attention(q, k, v, block_mask=mask)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_document_mask_with_clamped_ids_at_lengths_off_the_block_grid():
    gen = torch.Generator().manual_seed(4)
    for extra in range(4):
        length = 200 + extra
        cuts = torch.sort(torch.randperm(length - 1, generator=gen)[:4] + 1).values
        ids = torch.bucketize(torch.arange(length), cuts, right=True)

        def documents(b, h, q, kv, ids=ids):
            last = ids.shape[0] - 1
            return ids[q.clamp(0, last)] == ids[kv.clamp(0, last)]

        run_case(identity, batch=1, heads=2, tq=length, block=64, mask_mod=documents)


def test_a_mask_for_other_lengths_raises_valueerror():
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 1024, 8, generator=gen)
    mask = create_block_mask(causal, None, None, 512, 512)
    flex_attention(q[:, :, :512], q[:, :, :512], q[:, :, :512], block_mask=mask)
    with pytest.raises(ValueError, match="block_mask was created for"):
        flex_attention(q, q, q, block_mask=mask)
    mask = create_block_mask(causal, None, None, 511, 511)
    with pytest.raises(ValueError, match="block_mask was created for"):
        flex_attention(q[:, :, :512], q[:, :, :512], q[:, :, :512], block_mask=mask)


def test_pagedattention_block_masks_over_a_shared_page_cache():
    """PyTorch's PagedAttention: two sequences' keys scattered over interleaved pages of one
    cache (a key/value batch of 1 for both query batches); its converted block mask lists
    physical pages out of order, its converted mask_mod and score_mod map them back.  The
    answer, and the gradient of the queries, equal attention over the logical keys."""
    paged_module = pytest.importorskip("torch.nn.attention.experimental._paged_attention")
    page, pages, length, heads = 16, 8, 64, 2
    cache = paged_module.PagedAttention(pages, page, 2, device="cpu")
    for reach in (32, 64):  # pages taken in turn: batch 0 and 1 interleave
        for b in (0, 1):
            cache.reserve(torch.tensor(b), torch.tensor(reach))
    assert cache.page_table[:, :4].tolist() == [[1, 0, 5, 4], [3, 2, 7, 6]]  # out of order
    gen = torch.Generator().manual_seed(6)
    k, v = (torch.randn(2, heads, length, 8, generator=gen, dtype=torch.float64) for _ in "kv")
    k_cache, v_cache = (torch.zeros(1, heads, pages * page, 8, dtype=torch.float64) for _ in "kv")
    positions = torch.arange(length).expand(2, length)
    cache.assign(torch.arange(2), positions, k, v, k_cache, v_cache)
    logical = torch_flex.create_block_mask(causal, 2, 1, length, length, "cpu", BLOCK_SIZE=page)
    physical = cache.convert_logical_block_mask(logical)
    physical.mask_mod = cache.get_mask_mod(causal)
    score_mod = cache.get_score_mod(relative)
    q = torch.randn(2, heads, length, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    out = flex_attention(q, k_cache, v_cache, score_mod=score_mod, block_mask=physical)
    want = reference(q, k, v, relative, causal)
    torch.testing.assert_close(out, want)
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got, expected = (torch.autograd.grad((o * grad).sum(), q)[0] for o in (out, want))
    torch.testing.assert_close(got, expected)
