"""Context parallelism: one sequence over the ranks of a torch.distributed process group.

``ring_attention`` computes exact attention whose queries, keys and values lie in slices on
the ranks; ``shard_sequence`` / ``unshard_sequence`` cut a sequence into those slices and
put it back; ``sequence_positions`` gives each rank its tokens' global positions.
"""

from .layout import (
    SequenceLayout,
    sequence_layout,
    sequence_positions,
    shard_sequence,
    unshard_sequence,
)
from .ring import RingPeerError, ring_attention

__all__ = [
    "ring_attention",
    "RingPeerError",
    "shard_sequence",
    "unshard_sequence",
    "sequence_positions",
    "sequence_layout",
    "SequenceLayout",
]
