"""Timing starts from a warm C allocator (``engine.measure.warm_allocator``): in a fresh process a
large block is no longer served by mmap (fresh pages and page faults on every forward pass) once
autoprune has timed anything. glibc only; checked in a new process, whose allocator state is
known."""
import ctypes
import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, sys, torch
import torch.nn as nn

class Info(ctypes.Structure):  # struct mallinfo2: ten size_t fields, hblks is the fifth
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info

def mapped_while_held(nbytes):
    before = libc.mallinfo2().hblks
    block = torch.empty(nbytes, dtype=torch.uint8)
    during = libc.mallinfo2().hblks
    del block
    return during - before

if sys.argv[1] == "paired":
    from autoprune.engine.timer import PairedTimer
    model = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    PairedTimer(model, torch.rand(1, 3, 8, 8), threads=1, rounds=1, runs=1, warmup=1)
elif sys.argv[1] == "latency_ms":
    from autoprune.engine.measure import latency_ms
    latency_ms(nn.Sequential(nn.Conv2d(3, 4, 3)), torch.rand(1, 3, 8, 8), warmup=1, repeats=1)
else:
    import autoprune.engine.measure, autoprune.engine.timer  # imported, nothing timed
print("torch_pruning" in sys.modules)  # timing needs no pruning graph (nor timm, dynamo)
print(mapped_while_held(16 << 20))  # once: freeing a mapped block raises the threshold itself
"""


def _glibc_with_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="needs glibc >= 2.33 (mallinfo2)")
def test_timing_warms_the_allocator_first():
    def mapped(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True,
                             text=True, check=True).stdout.split()
        assert out[-2] == "False", f"{mode}: a process that only times imported torch_pruning"
        return int(out[-1])

    assert mapped("imported") == 1, "the premise: a fresh process maps a 16 MiB block"
    assert mapped("paired") == 0, "after a PairedTimer, a 16 MiB block must come from the heap"
    assert mapped("latency_ms") == 0, "after latency_ms, a 16 MiB block must come from the heap"
