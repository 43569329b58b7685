"""Bridges from other libraries' interfaces to qkv's kernels.

:mod:`qkv.integrations.transformers`: ``attn_implementation="qkv"`` for Hugging Face
``transformers`` models.  Each bridge imports its library on first use, so ``import qkv``
never needs it.
"""
