"""What the CPU offers INT8 kernels: AVX2, AVX-512, VNNI, AMX on x86; the dot-product and
int8 matrix instructions on ARM. Read from ``/proc/cpuinfo`` (its ``flags`` / ``Features``
line), once per process.

Why it matters (ONNX Runtime 1.32, MLAS): x86 without VNNI multiplies u8 x s8 pairs with
``vpmaddubsw``, whose int16 sums saturate (``reduce_range`` keeps weights to 7 bits); and it
fuses a QDQ convolution into its fast ``QLinearConv`` only when the activations are uint8
(``QDQIsInt8Allowed()`` is true on ARM only): S8S8 QDQ there runs each convolution in float
between a DequantizeLinear and a QuantizeLinear (measured one thread, 224 px, random weights, on
an AMD EPYC with AVX2 only: resnet18 FP32 40.3 ms, S8S8 41.5, U8S8 21.2; mobilenetv3_large_100
7.3, 20.2, 7.8; and on an AMD EPYC with AVX-512 and VNNI: resnet18 FP32 15.6 ms, S8S8 12.6, U8S8
4.7; mobilenetv3_large_100 3.07, 8.35, 3.02). So x86 gets U8S8 with or without VNNI.
"""
from __future__ import annotations

import functools
import platform
from typing import Any

# x86 flags (Linux names) -> our keys; ARM "Features" names -> ours
_X86 = {"avx2": "avx2", "avx512f": "avx512f", "avx512bw": "avx512bw",
        "avx512_vnni": "avx512_vnni", "avx_vnni": "avx_vnni", "avx_vnni_int8": "avx_vnni_int8",
        "amx_int8": "amx_int8", "avx512_bf16": "avx512_bf16"}
_ARM = {"asimddp": "arm_dotprod", "i8mm": "arm_i8mm"}
KEYS = tuple(_X86.values()) + tuple(_ARM.values())


def parse_cpu_flags(text: str, machine: str | None = None) -> dict[str, Any]:
    """The INT8-relevant features in ``text`` (a ``/proc/cpuinfo``, or just its flags line):
    ``{"arch", "model", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
    "avx_vnni_int8", "amx_int8", "avx512_bf16", "arm_dotprod", "arm_i8mm", "vnni", "amx"}``
    (``vnni``: AVX-512 VNNI or AVX-VNNI; ``amx``: AMX-INT8)."""
    flags: set[str] = set()
    model = ""
    lines = text.splitlines()
    if not any(":" in line for line in lines):  # a bare flags string
        flags = set(text.split())
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("flags", "features"):
            flags |= set(value.split())
        elif key in ("model name", "cpu model") and not model:
            model = value.strip()
    arch = machine or platform.machine() or "unknown"
    found = {ours: theirs in flags for theirs, ours in {**_X86, **_ARM}.items()}
    found["vnni"] = found["avx512_vnni"] or found["avx_vnni"]
    found["amx"] = found["amx_int8"]
    return {"arch": arch, "model": model, **found}


@functools.lru_cache(maxsize=1)
def cpu_features() -> dict[str, Any]:
    """This machine's INT8-relevant CPU features (see :func:`parse_cpu_flags`), read once;
    ``source`` says where from (``"unknown"``: no ``/proc/cpuinfo``, every feature False)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
        source = "/proc/cpuinfo"
    except OSError:
        text, source = "", "unknown"
    found = parse_cpu_flags(text)
    found["model"] = found["model"] or platform.processor() or ""
    return {**found, "source": source}


def is_x86(features: dict[str, Any]) -> bool:
    """Whether the features describe an x86-64 CPU."""
    return str(features.get("arch", "")).lower() in ("x86_64", "amd64", "i686", "x86")


def summary(features: dict[str, Any]) -> str:
    """The features in words: ``"x86_64: AVX2, no AVX-512, no VNNI, no AMX"``."""
    if not is_x86(features):
        dot = "dot-product" if features.get("arm_dotprod") else "no dot-product"
        return f"{features.get('arch')}: {dot}"
    def has(key: str, name: str) -> str:
        return name if features.get(key) else f"no {name}"
    return (f"{features.get('arch')}: {has('avx2', 'AVX2')}, {has('avx512f', 'AVX-512')}, "
            f"{has('vnni', 'VNNI')}, {has('amx', 'AMX')}")
