"""Built-in data: Fashion-MNIST (Debian's dataset-fashion-mnist package or any folder of
the IDX files)."""
from .fashion_mnist import CLASSES, FashionMNIST, find_root

__all__ = ["CLASSES", "FashionMNIST", "find_root"]
