"""Real pretrained checkpoints, read into networks built from qkv's own layers."""

from .bert import BertInputs, BertTokenizer, bert_config_from_hf, load_bert
from .gpt2 import GPT2Tokenizer, PretrainedLM, gpt2_config_from_hf, load_gpt2

__all__ = [
    "load_bert",
    "bert_config_from_hf",
    "BertTokenizer",
    "BertInputs",
    "load_gpt2",
    "gpt2_config_from_hf",
    "GPT2Tokenizer",
    "PretrainedLM",
]
