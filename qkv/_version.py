"""The package's version: a leaf module, so that anything may read it without importing
the rest of qkv."""

__version__ = "0.1.0"
