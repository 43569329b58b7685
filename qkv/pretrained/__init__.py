"""Real pretrained checkpoints, read into networks built from qkv's own layers.

``load_pretrained(DIR)`` reads any supported Hugging Face folder by its config.json's
model_type: bert, gpt2, llama, qwen2, mistral, as one :class:`~qkv.models.LoadedModel`.
"""

from .bert import BertInputs, BertTokenizer, bert_config_from_hf, load_bert
from .files import FolderTokenizer
from .gpt2 import GPT2Tokenizer, gpt2_config_from_hf, load_gpt2
from .llama import LLAMA_FAMILIES, llama_config_from_hf, load_llama
from .loading import PRETRAINED_FAMILIES, load_pretrained

__all__ = [
    "load_pretrained",
    "PRETRAINED_FAMILIES",
    "load_bert",
    "bert_config_from_hf",
    "BertTokenizer",
    "BertInputs",
    "load_gpt2",
    "gpt2_config_from_hf",
    "GPT2Tokenizer",
    "load_llama",
    "llama_config_from_hf",
    "LLAMA_FAMILIES",
    "FolderTokenizer",
]

#: Names that went when every loader came to return one LoadedModel -> what replaces them
#: (kept for one release).
_DEPRECATED = {"PretrainedLM": "LoadedModel", "PretrainedEncoder": "LoadedModel"}


def __getattr__(name: str):
    if name in _DEPRECATED:
        import warnings

        from ..models.loaded import LoadedModel

        warnings.warn(
            f"qkv.pretrained.{name} is deprecated: the loaders return qkv.models.LoadedModel "
            "(its model_type is config.json's, its name the architecture's); the alias goes in "
            "the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return LoadedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
