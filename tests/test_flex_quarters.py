"""The tile kernel walks large partial blocks in quarters (flex_plan.walk_grid): the same
answers as the reference, fewer key columns computed, and the quarters' states right."""

import pytest
import torch

import qkv.functional.backends.flex_plan as flex_plan
from qkv.functional import create_block_mask, flex_attention
from qkv.functional import patterns as P
from tests.test_flex import assert_same, inputs


@pytest.fixture
def quarters_from_8(monkeypatch):
    """Walk blocks of 8 rows and columns or more in quarters (128 by default), finding the
    quarters of a few partial blocks at a time."""
    monkeypatch.setattr(flex_plan, "REFINE_BLOCK", 8)
    monkeypatch.setattr(flex_plan, "REFINE_ELEMENTS", 3 * 16 * 16)


def _documents(batch):
    ids = torch.tensor([0] * 9 + [1] * 3 + [2] * 14 + [3] * 11)
    return ids if batch == 1 else torch.stack([ids, ids.roll(5)])


CASES = {
    "window": dict(mask_mod=P.sliding_window(10)),
    "window, blocks (8, 16), GQA, Tq != Tk": dict(
        mask_mod=P.sliding_window(12), block=(8, 16), shapes=dict(kv_heads=2, tk=45)
    ),
    "documents, ragged": dict(mask_mod=P.document(_documents(1))),
    "documents per batch": dict(mask_mod=P.document(_documents(2)), B=2),
    "prefix lm": dict(mask_mod=P.prefix_lm(11)),
    "dilated": dict(mask_mod=P.dilated(12, 3)),
    "window with a key/value batch of one": dict(
        mask_mod=P.sliding_window(9), shapes=dict(kv_batch=1)
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_quarters_give_the_reference_answer(quarters_from_8, name):
    case = dict(CASES[name])
    shapes = case.pop("shapes", {})
    q, k, v = inputs(**shapes)
    assert_same(q, k, v, enable_gqa="kv_heads" in shapes, block=case.pop("block", 16), **case)


def test_quarters_with_a_score_mod_reading_a_captured_tensor(quarters_from_8):
    q, k, v = inputs()
    table = torch.randn(37, dtype=torch.float64, requires_grad=True)
    score = lambda s, b, h, i, j: s + table[i - j]  # noqa: E731
    bias = table[torch.arange(37)[:, None] - torch.arange(37)]
    window = P.sliding_window(10)
    assert_same(q, k, v, mask_mod=window, block=16, score_mod=score, bias=bias, captured=(table,))


def test_quarters_states_and_the_columns_they_save(quarters_from_8, monkeypatch):
    """A window of 16 at block 16: every block row has two partial blocks (the diagonal and
    the one two back); in quarters, each half row computes 5 quarter-columns of 8 instead of
    6 of the half-blocks it would meet, and the quarters match the mask."""
    mask = create_block_mask(P.sliding_window(16), None, None, 64, 64, BLOCK_SIZE=16)
    partial, full, size = flex_plan.walk_grid(mask)
    assert size == (8, 8)
    i, j = torch.arange(64)[:, None], torch.arange(64)
    keep = ((i - j) >= 0) & ((i - j) < 16)
    quarters = keep.view(8, 8, 8, 8).transpose(1, 2)  # (row quarter, col quarter, 8, 8)
    assert torch.equal(full[0, 0], quarters.all(-1).all(-1))
    assert torch.equal(partial[0, 0], quarters.any(-1).any(-1) & ~quarters.all(-1).all(-1))
    assert flex_plan.walk_grid(mask)[0] is partial  # made once per block mask

    columns = []
    matmul = torch.matmul

    def count(a, b, **kw):
        if b.shape[-2] == 5:
            columns.append(b.shape[0] * b.shape[-1])
        return matmul(a, b, **kw)

    monkeypatch.setattr(torch, "matmul", count)
    q, k, v = inputs(batch=1, heads=1, tq=64, tk=64, dim=5)
    flex_attention(q, k, v, block_mask=mask)
    visited = int((partial | full).sum()) * 8  # key columns, each for 8 query rows
    assert sum(columns) == visited < 6 * 8 * 8  # 6 half-blocks of 8 per half row without
