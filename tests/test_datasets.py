"""Fashion-MNIST reader: real IDX files, balanced subsets, clear errors."""
import gzip

import numpy as np
import pytest

from autoprune.datasets import FashionMNIST, find_root
from autoprune.datasets.fashion_mnist import read_idx
from autoprune.errors import ConfigError


def _write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_root(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("t10k", 20)):
        _write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return tmp_path


def test_reads_idx_and_resizes(tiny_root):
    ds = FashionMNIST("test", root=tiny_root, size=32, channels=3)
    assert len(ds) == 20
    x, y = ds[3]
    assert x.shape == (3, 32, 32) and int(y) == 3
    assert abs(float(ds.images.mean())) < 2.0


def test_limit_is_class_balanced(tiny_root):
    ds = FashionMNIST("train", root=tiny_root, limit=20)
    assert len(ds) == 20 and ds.targets.bincount().tolist() == [2] * 10


def test_missing_root_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="apt-get install dataset-fashion-mnist"):
        find_root(tmp_path / "nowhere")


def test_truncated_idx_is_reported(tmp_path):
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    header = bytes([0, 0, 8, 3]) + b"".join(int(d).to_bytes(4, "big") for d in (5, 28, 28))
    with gzip.open(path, "wb") as f:
        f.write(header + b"\x00" * 100)
    with pytest.raises(ConfigError, match="truncated"):
        read_idx(path)


def test_debian_package_when_installed():
    try:
        root = find_root()
    except ConfigError:
        pytest.skip("dataset-fashion-mnist is not installed")
    ds = FashionMNIST("test", root=root, limit=100)
    assert len(ds) == 100 and ds.images.shape[1:] == (1, 28, 28)


def test_each_file_is_decoded_once_a_process_until_it_changes(tiny_root, monkeypatch):
    """Datasets built again from the same files share one decoding (gunzip of the 26 MB train
    images: ~0.7 s, a few hundred times in the suite); a replaced file is read anew."""
    from autoprune.datasets import fashion_mnist

    fashion_mnist._read_once.cache_clear()
    reads = []
    monkeypatch.setattr(fashion_mnist, "read_idx", lambda path: reads.append(path.name) or
                        read_idx(path))
    first = FashionMNIST("test", root=tiny_root, limit=10)
    again = FashionMNIST("test", root=tiny_root, size=32)
    assert sorted(reads) == ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    assert len(first) == 10 and len(again) == 20
    _write_idx(tiny_root / "t10k-labels-idx1-ubyte.gz", np.arange(30) % 10)  # another size
    _write_idx(tiny_root / "t10k-images-idx3-ubyte.gz", np.zeros((30, 28, 28)))
    assert len(FashionMNIST("test", root=tiny_root)) == 30 and len(reads) == 4
