"""A model family of its own, outside qkv: a tiny attention classifier of digit strings.
Importing this package registers it; `qkv train toy`, `qkv evaluate` and `qkv explore` then
read it like any built-in family."""

from qkv.families import register_family

from .family import FAMILY

register_family(FAMILY)
