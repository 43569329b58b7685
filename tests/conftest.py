import torch
from hypothesis import settings

# Small tensors keep the suite fast; one thread avoids thread-pool overhead on tiny ops
# (and oversubscription when a test spawns worker processes).
torch.set_num_threads(1)

settings.register_profile("qkv", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("qkv")
