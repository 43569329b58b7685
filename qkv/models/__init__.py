"""Complete networks, one file each, and what they share with the task code.

Importing this package registers every model type (``transformer``, ``rnn-attention``,
``rnn``, ``captioner``, ``bert``, ``lm``) so checkpoints can be rebuilt by name.
"""

from .base import Decodable, Seq2SeqOutput, StepOutput, select_state
from .bert import BertConfig, BertModel
from .captioner import Captioner, CaptionerConfig
from .classifier import (
    ClassifierConfig,
    ClipClassifier,
    ClipClassifierConfig,
    FrameTagger,
    FrameTaggerConfig,
    ImageClassifier,
)
from .lm import DecoderLM, LMOutput, LMState
from .lm_builders import ARCHITECTURES, architecture_config, gpt, llama, nanochat
from .lm_config import LMConfig, window_layers_of
from .loaded import LoadedModel
from .registry import available_models, build_model, config_to_dict, model_type_of, register_model
from .rnn import RNNBaseline, RNNConfig, RNNTranslator
from .transformer import Transformer, TransformerConfig

__all__ = [
    "Decodable",
    "Seq2SeqOutput",
    "StepOutput",
    "select_state",
    "available_models",
    "build_model",
    "config_to_dict",
    "model_type_of",
    "register_model",
    "Transformer",
    "TransformerConfig",
    "RNNTranslator",
    "RNNBaseline",
    "RNNConfig",
    "Captioner",
    "CaptionerConfig",
    "BertModel",
    "BertConfig",
    "ClassifierConfig",
    "ClipClassifierConfig",
    "FrameTaggerConfig",
    "ImageClassifier",
    "ClipClassifier",
    "FrameTagger",
    "DecoderLM",
    "LMConfig",
    "ARCHITECTURES",
    "architecture_config",
    "gpt",
    "llama",
    "nanochat",
    "window_layers_of",
    "LMOutput",
    "LMState",
    "LoadedModel",
]

#: Names that went in the one-LM reshape -> what replaces them (kept for one release).
_DEPRECATED = {"TransformerLM": "DecoderLM", "TransformerLMConfig": "LMConfig"}


def __getattr__(name: str):
    if name in _DEPRECATED:
        import warnings

        new = _DEPRECATED[name]
        warnings.warn(
            f"qkv.models.{name} is deprecated: use qkv.models.{new} (or the gpt() / llama() "
            "builders); the alias goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
