"""PyTorch's own BlockMask objects in qkv.flex_attention, and qkv's BlockMask with the rest
of PyTorch's surface (from_kv_blocks, slicing for decoding, _adjust, as_tuple, to, numel),
each against PyTorch's class or a float64 dense reference."""

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import flex_attention as torch_flex

import qkv
from qkv.errors import QkvError
from qkv.functional import patterns as P
from qkv.functional.block_mask import as_block_mask
from qkv.functional.flex import BlockMask, create_block_mask, create_mask, flex_attention

warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


def inputs(batch=2, heads=2, tq=70, tk=70, dim=4):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, tq, dim, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(batch, heads, tk, dim, generator=gen, dtype=torch.float64) for _ in "kv")
    return [t.requires_grad_() for t in (q, k, v)]


def dense(mask_mod, batch, heads, tq, tk):
    b, h = torch.arange(batch).view(-1, 1, 1, 1), torch.arange(heads).view(1, -1, 1, 1)
    i, j = torch.arange(tq).view(1, 1, -1, 1), torch.arange(tk).view(1, 1, 1, -1)
    return mask_mod(b, h, i, j).expand(batch, heads, tq, tk)


def reference(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
    weights = scores.softmax(-1).nan_to_num(0.0)  # a row with no key: zeros
    return weights @ v


def assert_matches_reference(block_mask, mask, q, k, v):
    grad = torch.randn(q.shape[:3] + v.shape[-1:], dtype=torch.float64)
    out = flex_attention(q, k, v, block_mask=block_mask)
    got = torch.autograd.grad((out * grad).sum(), (q, k, v))
    want = reference(q, k, v, mask)
    expected = torch.autograd.grad((want * grad).sum(), (q, k, v))
    torch.testing.assert_close(out, want)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


documents = torch.tensor([0] * 30 + [1] * 25 + [2] * 15)
CASES = {
    "causal": (P.causal, None, None),
    "window": (P.sliding_window(17), None, None),
    "documents": (qkv.and_masks(P.causal, P.document(documents)), None, None),
    "prefix per batch": (lambda b, h, i, j: (j <= i) | (j < 10 + 20 * b), 2, None),
    "per head": (lambda b, h, i, j: (i - j).abs() <= 4 + 9 * h, None, 2),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("block", [16, (16, 32), 128, (8, 24)])
def test_pytorchs_create_block_mask_trains_equal_to_the_dense_reference(name, block):
    mask_mod, batch, heads = CASES[name]
    torch_mask = torch_flex.create_block_mask(
        mask_mod, batch, heads, 70, 70, device="cpu", BLOCK_SIZE=block, _compile=False
    )
    assert_matches_reference(torch_mask, dense(mask_mod, 2, 2, 70, 70), *inputs())


def test_without_full_blocks_and_from_kv_blocks_lists_in_any_order():
    q, k, v = inputs(tq=64, tk=64)
    partial_only = torch_flex.create_block_mask(
        P.causal, None, None, 64, 64, device="cpu", BLOCK_SIZE=16, separate_full_blocks=False
    )
    assert partial_only.full_kv_num_blocks is None
    assert_matches_reference(partial_only, dense(P.causal, 2, 2, 64, 64), q, k, v)
    # by hand: query block i visits key blocks i (partial, the diagonal) and i - 1 (full),
    # listed last-first: a window of 16 to 32 keys
    rows = torch.arange(4)
    kv_num = torch.ones(1, 1, 4, dtype=torch.int32)
    kv_idx = torch.stack([rows, (rows + 1) % 4, (rows + 2) % 4, (rows + 3) % 4], -1)
    full_num = (rows > 0).to(torch.int32).view(1, 1, 4)
    full_idx = torch.stack([(rows - 1).clamp(min=0), rows, (rows + 1) % 4, (rows + 2) % 4], -1)
    lists = (kv_num, kv_idx.view(1, 1, 4, 4).int(), full_num, full_idx.view(1, 1, 4, 4).int())
    mask = (P.causal(0, 0, *torch.meshgrid(torch.arange(64), torch.arange(64), indexing="ij"))) & (
        torch.arange(64)[:, None] // 16 - torch.arange(64) // 16 <= 1
    )
    for cls in (torch_flex.BlockMask, BlockMask):
        block_mask = cls.from_kv_blocks(*lists, BLOCK_SIZE=16, mask_mod=P.causal)
        assert block_mask.shape == (1, 1, 64, 64)
        assert_matches_reference(block_mask, mask.expand(2, 2, 64, 64), q, k, v)
    ours = BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=16, mask_mod=P.causal)
    theirs = torch_flex.BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=16, mask_mod=P.causal)
    torch.testing.assert_close(ours.to_dense(), theirs.to_dense())
    for a, b in zip(ours.as_tuple(), theirs.as_tuple(), strict=True):
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(_dense_of(a), _dense_of(b))
        elif not callable(b):
            assert a == b


def _dense_of(x):
    return x if x.dim() < 4 else x.sort(-1).values  # lists: compare as sets per row


def test_a_pytorch_mask_is_read_from_its_blocks_never_evaluated_on_the_whole_grid():
    seen = []

    def watched(b, h, q_idx, kv_idx):
        seen.append(torch.broadcast_shapes(b.shape, h.shape, q_idx.shape, kv_idx.shape).numel())
        return (q_idx - kv_idx >= 0) & (q_idx - kv_idx < 40)

    length = 512
    torch_mask = torch_flex.create_block_mask(
        watched, None, None, length, length, device="cpu", BLOCK_SIZE=64
    )
    seen.clear()
    q, k, v = (t.detach()[:1, :1].float() for t in inputs(tq=length, tk=length))
    out = flex_attention(q, k, v, block_mask=torch_mask)
    assert seen and max(seen) <= 64 * 64 * length // 64  # partial blocks only
    assert sum(seen) < length * length / 3
    converted = as_block_mask(torch_mask)
    assert as_block_mask(torch_mask) is converted  # kept on the mask object
    per_call = len(seen)
    torch.testing.assert_close(flex_attention(q, k, v, block_mask=torch_mask), out)
    assert len(seen) == 2 * per_call  # the same tiles again, no conversion
    ours = create_block_mask(watched, None, None, length, length, BLOCK_SIZE=64)
    seen.clear()
    torch.testing.assert_close(flex_attention(q, k, v, block_mask=ours), out)
    assert len(seen) == per_call  # what qkv's own mask of the pattern evaluates
    torch_mask.mask_mod = P.causal  # a changed field is seen
    assert as_block_mask(torch_mask) is not converted
    assert as_block_mask(torch_mask).mask_mod is P.causal


@pytest.mark.parametrize("pattern", ["window", "documents"])
def test_a_pytorch_mask_plans_the_same_walk_as_qkvs_own(pattern):
    """The same tiles, bundled alike, the same quarters of partial blocks: the speed of
    qkv's own mask carries over (benchmarks/flex_dropin.py times it)."""
    from qkv.functional.backends.flex_plan import plan_flex, walk_grid

    length = 2048
    mask_mod = P.sliding_window(256)
    if pattern == "documents":
        mask_mod = qkv.and_masks(P.causal, P.document(torch.arange(length) // 512))
    ours = create_block_mask(mask_mod, None, None, length, length, device="cpu")
    theirs = as_block_mask(
        torch_flex.create_block_mask(mask_mod, None, None, length, length, device="cpu")
    )
    a, b = walk_grid(ours), walk_grid(theirs)
    assert a[2] == b[2] and all(torch.equal(x, y) for x, y in zip(a[:2], b[:2], strict=True))
    shapes = (torch.Size([1, 8, length, 64]),) * 2
    assert plan_flex(ours, shapes, 0.1, None).groups == plan_flex(theirs, shapes, 0.1, None).groups
    assert walk_grid(theirs) is b  # kept on the mask: planned once


@pytest.mark.parametrize("make", ["torch", "qkv"])
def test_decoding_slices_one_block_row_per_step(make):
    """A KV cache of 96 positions; step t sees positions <= t: the step's mask is the
    block row of t, with seq_lengths (1, 96) and the mask_mod shifted to t."""
    create = torch_flex.create_block_mask if make == "torch" else create_block_mask
    length, block = 96, 32
    mask = create(P.causal, 1, 1, length, length, device="cpu", BLOCK_SIZE=block)
    q, k, v = (t.detach()[:1] for t in inputs(tq=length, tk=length))
    full = reference(q, k, v, dense(P.causal, 1, 2, length, length))
    for t in (0, 5, 31, 32, 63, 95):
        step = mask[:, :, t // block]
        assert step.kv_num_blocks.shape == (1, 1, 1)
        with pytest.raises(RuntimeError, match="sliced BlockMask"):
            flex_attention(q[:, :, t : t + 1], k, v, block_mask=_with(step, (1, length)))
        step.mask_mod = lambda b, h, q_idx, kv_idx, t=t: mask.mask_mod(b, h, q_idx + t, kv_idx)
        step.seq_lengths = (1, length)
        out = flex_attention(q[:, :, t : t + 1], k, v, block_mask=step)
        torch.testing.assert_close(out, full[:, :, t : t + 1])


def _with(block_mask, seq_lengths):
    block_mask.seq_lengths = seq_lengths
    return block_mask


def test_slicing_adjusting_moving_and_tuples_match_pytorchs():
    per_head = CASES["per head"][0]
    kw = dict(device="cpu", BLOCK_SIZE=(16, 8))
    ours, theirs = (
        create_block_mask(per_head, 2, 3, 70, 50, **kw),
        torch_flex.create_block_mask(per_head, 2, 3, 70, 50, **kw),
    )
    for index in [0, (1, 2), (slice(0, 2), slice(1, 3)), (0, 1, torch.tensor([1, 3]))]:
        a, b = ours[index], theirs[index]
        assert a.shape == b.shape and a.kv_num_blocks.shape == b.kv_num_blocks.shape
        torch.testing.assert_close(a.to_dense(), b.to_dense())
    for lengths in [(40, 30), (70, 50), (33, 17)]:  # cropped to the upper-left corner
        a = ours._adjust(*lengths)
        assert a.shape == (2, 3, *lengths)
        q, k, v = inputs(batch=2, heads=3, tq=lengths[0], tk=lengths[1])
        assert_matches_reference(a, dense(per_head, 2, 3, *lengths), q, k, v)
    # PyTorch's own _adjust (which keeps list entries past the new width) on a causal mask
    causal_ours = create_block_mask(P.causal, 1, 1, 96, 96, BLOCK_SIZE=16)
    causal_theirs = torch_flex.create_block_mask(P.causal, 1, 1, 96, 96, "cpu", BLOCK_SIZE=16)
    a, b = causal_ours._adjust(40, 40), causal_theirs._adjust(40, 40)
    torch.testing.assert_close(a.to_dense(), b.to_dense())
    q, k, v = inputs(batch=1, heads=2, tq=40, tk=40)
    for adjusted in (a, b):
        assert_matches_reference(adjusted, dense(P.causal, 1, 2, 40, 40), q, k, v)
    assert ours.numel() == theirs.numel() == 2 * 3 * 70 * 50
    flat, nested = ours.as_tuple(), ours.as_tuple(flatten=False)
    assert len(flat) == len(theirs.as_tuple()) and len(nested) == len(theirs.as_tuple(False))
    assert flat[:2] == (70, 50) and flat[-3:-1] == (16, 8) and nested[0] == (70, 50)
    moved = ours.to("meta")
    assert moved.kv_indices.device.type == "meta" and ours.kv_indices.device.type == "cpu"
    assert "(0, 0)" in ours.to_string(grid_size=(4, 3)) and ours.to_string(grid_size=-1)


def test_dq_write_order_and_the_other_keywords_mean_what_they_mean_in_pytorch():
    kw = dict(device="cpu", BLOCK_SIZE=16, compute_dq_write_order=True)
    for order in (True, False):
        ours = create_block_mask(P.sliding_window(30), 1, 2, 96, 96, dq_kv_order=order, **kw)
        theirs = torch_flex.create_block_mask(
            P.sliding_window(30), 1, 2, 96, 96, dq_kv_order=order, **kw
        )
        torch.testing.assert_close(ours.dq_write_order, theirs.dq_write_order)
        torch.testing.assert_close(ours.dq_write_order_full, theirs.dq_write_order_full)
        assert ours.dq_kv_order_spt is order
    with pytest.raises(ValueError, match="dq_kv_order"):
        create_block_mask(P.causal, 1, 1, 32, 32, dq_kv_order="yes")
    no_full = create_block_mask(
        P.causal, None, None, 64, 64, BLOCK_SIZE=16, separate_full_blocks=False, _compile=True
    )
    assert no_full.full_kv_num_blocks is None
    torch.testing.assert_close(
        no_full.to_dense(),
        torch_flex.create_block_mask(
            P.causal, None, None, 64, 64, device="cpu", BLOCK_SIZE=16, separate_full_blocks=False
        ).to_dense(),
    )
    assert create_block_mask(P.causal, 1, 1, 32, 32).kv_indices.device.type == "cpu"


def test_create_mask_equals_pytorchs_for_mask_and_score_functions():
    soft = lambda s, b, h, i, j: torch.where(j <= i + h, s, -math.inf)  # noqa: E731
    for fn in (CASES["per head"][0], P.causal, soft):
        torch.testing.assert_close(
            create_mask(fn, 2, 3, 20, 24), torch_flex.create_mask(fn, 2, 3, 20, 24, "cpu")
        )


def test_masks_for_another_call_raise_pytorchs_exception_types():
    q, k, v = inputs(tq=64, tk=64)
    torch_mask = torch_flex.create_block_mask(P.causal, None, None, 64, 64, device="cpu")
    with pytest.raises(ValueError, match="created for"):
        flex_attention(q[:, :, :32], k, v, block_mask=torch_mask)
    with pytest.raises(ValueError, match=r"_adjust\(32, 64\)"):
        flex_attention(q[:, :, :32], k, v, block_mask=create_block_mask(P.causal, 1, 1, 64, 64))
    with pytest.raises(ValueError, match="built for"):
        flex_attention(q, k, v, block_mask=create_block_mask(P.causal, 3, None, 64, 64))
    with pytest.raises(ValueError, match="built for"):
        flex_attention(q, k, v, block_mask=torch_flex.create_block_mask(P.causal, 1, 5, 64, 64))
    for on_meta in (torch_mask.to("meta"), create_block_mask(P.causal, 1, 1, 64, 64).to("meta")):
        with pytest.raises(RuntimeError, match="same device") as error:
            flex_attention(q, k, v, block_mask=on_meta)
        assert isinstance(error.value, QkvError)
    with pytest.raises(QkvError, match="must be a BlockMask"):
        flex_attention(q, k, v, block_mask=torch.ones(64, 64, dtype=torch.bool))


def test_a_score_mod_given_to_create_block_mask_is_refused_as_pytorch():
    softcap = lambda s, b, h, i, j: s  # noqa: E731
    for create in (torch_flex.create_block_mask, create_block_mask):
        with pytest.raises(AssertionError, match="mask_mod"):
            create(softcap, None, None, 32, 32, device="cpu")


@settings(max_examples=20, deadline=None)
@given(
    data=st.data(),
    block_q=st.integers(1, 24),
    block_k=st.integers(1, 24),
    tq=st.integers(1, 60),
    tk=st.integers(1, 60),
    separate=st.booleans(),
)
def test_any_block_lists_in_any_order_and_any_block_size(data, block_q, block_k, tq, tk, separate):
    """PyTorch's from_kv_blocks with random partial / full grids, the lists shuffled:
    attention sees exactly (partial blocks where the mask_mod allows) | full blocks."""
    n_q, n_k = -(-tq // block_q), -(-tk // block_k)
    seed = data.draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    kind = torch.randint(0, 3, (1, 2, n_q, n_k), generator=gen)  # 0 empty, 1 partial, 2 full
    if not separate:
        kind = kind.clamp(max=1)

    def lists(grid):
        count = grid.sum(-1, dtype=torch.int32)
        keys = torch.rand(grid.shape, generator=gen) - 2.0 * grid  # chosen first, shuffled
        return count, keys.argsort(-1).to(torch.int32)

    partial, full = kind == 1, kind == 2
    mask_mod = lambda b, h, i, j: (i + 2 * j + h) % 3 != 0  # noqa: E731
    block_mask = torch_flex.BlockMask.from_kv_blocks(
        *lists(partial), *(lists(full) if separate else (None, None)),
        BLOCK_SIZE=(block_q, block_k), mask_mod=mask_mod, seq_lengths=(tq, tk),
    )  # fmt: skip
    grid = lambda g: g.repeat_interleave(block_q, 2).repeat_interleave(block_k, 3)  # noqa: E731
    allowed = (grid(partial) & dense(mask_mod, 1, 2, n_q * block_q, n_k * block_k)) | grid(full)
    q, k, v = (t[:1].detach() for t in inputs(batch=1, heads=2, tq=tq, tk=tk))
    out = flex_attention(q, k, v, block_mask=block_mask)
    torch.testing.assert_close(out, reference(q, k, v, allowed[..., :tq, :tk]))
