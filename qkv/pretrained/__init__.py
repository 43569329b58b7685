"""Real pretrained checkpoints, read into networks built from qkv's own layers.

``load_pretrained(DIR)`` reads any supported Hugging Face folder by its config.json's
model_type: bert, gpt2, llama, qwen2, mistral.
"""

from .bert import BertInputs, BertTokenizer, bert_config_from_hf, load_bert
from .files import FolderTokenizer
from .gpt2 import GPT2Tokenizer, PretrainedLM, gpt2_config_from_hf, load_gpt2
from .llama import LLAMA_FAMILIES, llama_config_from_hf, load_llama
from .loading import PRETRAINED_FAMILIES, PretrainedEncoder, load_pretrained

__all__ = [
    "load_pretrained",
    "PRETRAINED_FAMILIES",
    "PretrainedEncoder",
    "load_bert",
    "bert_config_from_hf",
    "BertTokenizer",
    "BertInputs",
    "load_gpt2",
    "gpt2_config_from_hf",
    "GPT2Tokenizer",
    "PretrainedLM",
    "load_llama",
    "llama_config_from_hf",
    "LLAMA_FAMILIES",
    "FolderTokenizer",
]
