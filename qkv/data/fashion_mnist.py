"""Fashion-MNIST (Xiao et al. 2017) read where Debian's ``dataset-fashion-mnist`` puts it.

Four gzip IDX files under ``/usr/share/datasets/fashion-mnist/``: 60,000 training and 10,000
test images, 28 x 28 grey levels, 10 classes.  An IDX file is a big-endian header (magic
number 2051 for images, 2049 for labels, then the sizes) followed by the raw bytes: images
start at byte 16, labels at byte 8.  Nothing is downloaded or shipped.
"""

from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path

import numpy as np

from qkv.errors import DataError, MissingFileError

__all__ = ["FASHION_MNIST_DIR", "FASHION_MNIST_CLASSES", "read_idx", "load_fashion_mnist"]

#: Where the Debian package installs the files (``QKV_FASHION_MNIST`` overrides it).
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "t-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle-boot",
)
_FILES = {"train": "train", "test": "t10k"}
_MAGIC = {2051: 3, 2049: 1}  # magic number -> number of dimensions (images, labels)
INSTALL_HINT = "install it with `apt-get install dataset-fashion-mnist`"


def read_idx(path: str | Path) -> np.ndarray:
    """One gzip IDX file as a uint8 array: (N, rows, columns) images or (N,) labels."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"Fashion-MNIST file not found: {path}; {INSTALL_HINT}")
    try:
        with gzip.open(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as error:
        raise DataError(f"cannot read {path} as a gzip IDX file: {error}") from None
    magic = int.from_bytes(data[:4], "big") if len(data) >= 4 else -1
    if magic not in _MAGIC:
        raise DataError(f"{path} is not an IDX image or label file (magic number {magic})")
    dims = _MAGIC[magic]
    header = 4 + 4 * dims  # 16 bytes for images, 8 for labels
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    expected = header + int(np.prod(shape))
    if len(data) != expected:
        raise DataError(
            f"{path} holds {len(data)} bytes but its header {shape} asks for {expected}; "
            f"the file is truncated or corrupt ({INSTALL_HINT} again)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def _folder() -> Path:
    return Path(os.environ.get("QKV_FASHION_MNIST", FASHION_MNIST_DIR))


@functools.lru_cache(maxsize=4)
def _load(folder: Path, part: str) -> tuple[np.ndarray, np.ndarray]:
    if not folder.is_dir():
        raise MissingFileError(
            f"Fashion-MNIST is not installed (no folder {folder}); {INSTALL_HINT}"
        )
    prefix = _FILES[part]
    images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(
            f"Fashion-MNIST {part}: {images.shape} images do not match {labels.shape} labels"
        )
    if labels.max(initial=0) >= len(FASHION_MNIST_CLASSES):
        raise DataError(f"Fashion-MNIST {part}: label {labels.max()} is not one of 10 classes")
    return images, labels


def load_fashion_mnist(part: str) -> tuple[np.ndarray, np.ndarray]:
    """The "train" (60,000) or "test" (10,000) file pair: images (N, 28, 28) uint8 and labels
    (N,) uint8 in 0..9 (read-only arrays, cached).  The folder is ``FASHION_MNIST_DIR`` unless
    the ``QKV_FASHION_MNIST`` environment variable names another.

    Raises MissingFileError (naming the Debian package) when the files are absent, DataError
    when they cannot be read."""
    if part not in _FILES:
        raise DataError(f"part={part!r} must be 'train' or 'test'")
    return _load(_folder(), part)
