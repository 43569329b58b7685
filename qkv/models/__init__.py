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
from .lm import LMOutput, LMState, TransformerLM, TransformerLMConfig
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
    "TransformerLM",
    "TransformerLMConfig",
    "LMOutput",
    "LMState",
]
