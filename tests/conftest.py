import os

import torch
from hypothesis import settings

# Small tensors keep the suite fast; two cores are shared by the interpreter and torch.
torch.set_num_threads(min(2, os.cpu_count() or 1))

settings.register_profile("qkv", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("qkv")
