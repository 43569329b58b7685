import pytest
import torch
from hypothesis import settings

# Small tensors keep the suite fast; one thread avoids thread-pool overhead on tiny ops
# (and oversubscription when a test spawns worker processes).
torch.set_num_threads(1)

settings.register_profile("qkv", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("qkv")


# Tests marked ``@pytest.mark.cuda`` take their device from this fixture: they run on the CPU
# everywhere and also on CUDA where a GPU exists (``python -m pytest -m cuda`` there).
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(), reason="no CUDA device on this machine"
        ),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)
