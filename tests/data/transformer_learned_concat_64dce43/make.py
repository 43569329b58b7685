"""Run with the code of commit 64dce43 (before positions became components) on PYTHONPATH."""

import sys

import torch

from qkv.models.transformer import Transformer, TransformerConfig
from qkv.training.checkpoint import save_checkpoint

out = sys.argv[1]
torch.manual_seed(0)
config = TransformerConfig(
    23,
    d_model=8,
    num_heads=2,
    num_encoder_layers=1,
    num_decoder_layers=1,
    d_ff=16,
    dropout=0.0,
    max_len=8,
    positions="learned_concat",
)
model = Transformer(config).eval()
with torch.no_grad():  # make every parameter count: biases start at 0, norms at 1
    for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
source = torch.tensor([[5, 9, 4, 7, 0]])
target = torch.tensor([[1, 6, 8]])
with torch.no_grad():
    logits = model(source, target).logits
metadata = {
    "note": "saved by qkv at commit 64dce43, before positions became components",
    "source": source.tolist(),
    "target": target.tolist(),
    "logits": logits.tolist(),
}
print(save_checkpoint(out, model, step=0, metadata=metadata))
