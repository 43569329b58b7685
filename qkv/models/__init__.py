"""Complete networks, one file each, and what they share with the task code."""

from .base import Decodable, Seq2SeqOutput, StepOutput, select_state
from .registry import available_models, build_model, config_to_dict, model_type_of, register_model

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
]
