"""Real pretrained checkpoints, read into networks built from qkv's own layers."""

from .bert import BertInputs, BertTokenizer, bert_config_from_hf, load_bert

__all__ = ["load_bert", "bert_config_from_hf", "BertTokenizer", "BertInputs"]
