"""A transformers model trained through attn_implementation="qkv", "sdpa" and "eager".

    python -m benchmarks.hf_models [--length 4096] [--threads 1 2] [--rounds 5]

A random Mistral-style model from transformers' own ``MistralConfig`` (2 layers, width 256,
4 heads, 2 key/value heads, MLP 512, vocab 512), one training step (forward + backward of
the language-model loss, ``use_cache=False``) on one row, three ways from the same weights,
taking turns in one process (``benchmarks.common.interleaved``), at each thread count:

- **window**: a sliding window of 256 over ``--length`` tokens;
- **packed**: 16 documents of ``length / 16`` tokens in one row (position ids restart at 0;
  transformers turns them into a document mask), window 256 as well;
- **causal** and **padded**: the same model without a window, one causal row and a batch of
  four rows padded to the longest (``--length / 4`` tokens, a quarter to all of them real):
  the plain cases, where qkv should cost what SDPA costs.

Printed per case: the seconds of a step under each implementation, sdpa / qkv, and the
*attention-only* ratio -- one layer's mask and attention, forward and backward, on the
same query/key/value, the rest of the model left out.  Losses of qkv and eager agree to a
relative 1e-4 (checked before timing).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from benchmarks.common import interleaved, machine, table

IMPLEMENTATIONS = ("qkv", "sdpa", "eager")


def config(window: int | None):
    import transformers

    return transformers.MistralConfig(
        vocab_size=512,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        sliding_window=window,
        max_position_embeddings=16384,
        use_cache=False,
    )


def models(window: int | None) -> dict[str, torch.nn.Module]:
    """The same random weights under each implementation."""
    import transformers

    torch.manual_seed(0)
    base = transformers.MistralForCausalLM(config(window))
    result = {}
    for name in IMPLEMENTATIONS:
        model = transformers.MistralForCausalLM._from_config(
            copy.deepcopy(base.config), attn_implementation=name
        )
        model.load_state_dict(base.state_dict())
        result[name] = model.train()
    return result


def cases(length: int) -> dict[str, tuple[int | None, dict]]:
    """case -> (window, the model's keyword arguments)."""
    generator = torch.Generator().manual_seed(1)
    row = torch.randint(0, 512, (1, length), generator=generator)
    documents = 16
    packed = torch.arange(length // documents).repeat(documents)[None]
    batch = torch.randint(0, 512, (4, length // 4), generator=generator)
    real = torch.tensor([length // 4, length // 8, 3 * length // 16, length // 16])
    padding = (torch.arange(length // 4) < real[:, None]).long()
    labels = batch.masked_fill(padding == 0, -100)
    return {
        "window 256": (256, dict(input_ids=row, labels=row)),
        f"packed {documents}x{length // documents}": (
            256,
            dict(input_ids=row, labels=row, position_ids=packed),
        ),
        "causal": (None, dict(input_ids=row, labels=row)),
        "padded 4 rows": (None, dict(input_ids=batch, attention_mask=padding, labels=labels)),
    }


def step(model, kwargs):
    def run():
        model.zero_grad(set_to_none=True)
        model(**kwargs, use_cache=False).loss.backward()

    return run


def attention_only(model, kwargs):
    """One layer's mask and attention, forward and backward, as this implementation runs
    them inside the model: the layer's query/key/value are captured from one forward pass."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    captured = {}
    layer = model.model.layers[0].self_attn
    name = model.config._attn_implementation
    function = ALL_ATTENTION_FUNCTIONS[name] if name != "eager" else None
    if function is None:
        from transformers.models.mistral.modeling_mistral import eager_attention_forward

        function = eager_attention_forward

    def capture(module, query, key, value, attention_mask, **extra):
        captured.update(query=query, key=key, value=value, extra=extra)
        batch, heads, length, _ = query.shape
        return query.new_zeros(batch, length, heads, value.shape[-1]), None

    import transformers

    # layer 0's query/key/value are projections of the embeddings: no mask is needed to get them
    transformers.AttentionInterface.register("_capture", capture)
    model.config._attn_implementation_internal = "_capture"
    try:
        with torch.no_grad():
            model.model(**{k: v for k, v in kwargs.items() if k != "labels"}, use_cache=False)
    finally:
        model.config._attn_implementation_internal = name
        del transformers.AttentionInterface._global_mapping["_capture"]
    q, k, v = (captured[n].detach().requires_grad_() for n in ("query", "key", "value"))
    embeds = torch.zeros(q.shape[0], q.shape[2], 1)
    mask_kwargs = dict(
        config=model.config,
        inputs_embeds=embeds,
        attention_mask=kwargs.get("attention_mask"),
        cache=None,
        position_ids=kwargs.get("position_ids"),
    )

    def run():
        from transformers import masking_utils

        if model.config.sliding_window is None:
            mask = masking_utils.create_causal_mask(**mask_kwargs)
        else:
            mask = masking_utils.create_sliding_window_causal_mask(**mask_kwargs)
        out, _ = function(layer, q, k, v, mask, **captured["extra"])
        out.sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args()
    import transformers

    from qkv.integrations.transformers import register

    transformers.logging.set_verbosity_error()
    register()
    rows = []
    built = {window: models(window) for window in (256, None)}
    for case, (window, kwargs) in cases(args.length).items():
        if args.cases and not any(case.startswith(c) for c in args.cases):
            continue
        runs = built[window]
        with torch.no_grad():
            losses = {name: float(model(**kwargs).loss) for name, model in runs.items()}
        assert abs(losses["qkv"] - losses["eager"]) <= 1e-4 * abs(losses["eager"]), losses
        assert abs(losses["qkv"] - losses["sdpa"]) <= 1e-4 * abs(losses["sdpa"]), losses
        for threads in args.threads:
            torch.set_num_threads(threads)
            start = time.perf_counter()
            times = interleaved(
                {name: step(model, kwargs) for name, model in runs.items()}, rounds=args.rounds
            )
            attention = interleaved(
                {name: attention_only(runs[name], kwargs) for name in ("qkv", "sdpa")},
                rounds=args.rounds,
            )
            rows.append(
                [
                    case,
                    threads,
                    times["qkv"],
                    times["sdpa"],
                    times["eager"],
                    times["sdpa"] / times["qkv"],
                    attention["sdpa"] / attention["qkv"],
                    f"{losses['qkv']:.6f}",
                ]
            )
            print(f"  {case}, {threads} thread(s): {time.perf_counter() - start:.0f} s", flush=True)
    print(machine())
    print(
        f"length {args.length}, fp32, one training step (forward + backward), median of {args.rounds}"
    )
    headers = ["case", "threads", "qkv (s)", "sdpa (s)", "eager (s)", "sdpa / qkv", "attention only", "loss"]  # fmt: skip
    print(table(headers, rows))


if __name__ == "__main__":
    main()
