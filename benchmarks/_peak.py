"""This machine's peaks, for the "fraction of peak" column of case f.

Compute: FMA units x lanes per unit x 2 flops x clock, per core, from /proc/cpuinfo (the
vendor, family and flags say which core it is). The clock is the larger of ``cpu MHz``
(under a hypervisor, the nominal clock) and the one measured in the run (a chain of
dependent one-cycle integer operations, compiled by numba), since boost clocks beat the
nominal one. Memory: measured in the same run, as the bandwidth of one core copying a
large array with numpy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["ComputePeak", "compute_peak", "copy_bandwidth", "measured_ghz"]


@dataclass(frozen=True)
class ComputePeak:
    """Peak f32/f64 GFLOP/s of one core, and how it was derived."""

    f32: float
    f64: float
    how: str


def _cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def measured_ghz(iterations: int) -> float:
    """The clock this core runs at, from a loop of ``iterations`` steps each two dependent
    one-cycle integer operations (add, xor): no compiler can shorten or vectorize it.
    0.0 without numba."""
    try:
        import numba
    except Exception:
        return 0.0

    @numba.njit  # type: ignore[misc]
    def chain(n: int, k: int) -> int:
        x = 0
        for i in range(n):
            x = (x + i) ^ k
        return x

    chain(10, 3)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        chain(iterations, 12345)
        best = min(best, time.perf_counter() - start)
    return 2 * iterations / best / 1e9


def compute_peak(iterations: int = 100_000_000) -> ComputePeak:
    """One core's FMA peak, from the CPU's vendor, family, flags and clock."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    vendor, family = info.get("vendor_id", "?"), int(info.get("cpu family", "0") or 0)
    try:
        nominal = float(info.get("cpu MHz", "0")) / 1000
    except ValueError:
        nominal = 0.0
    measured = measured_ghz(iterations)
    ghz = max(nominal, measured)
    if "avx512f" in flags and vendor == "AuthenticAMD" and family == 0x19:
        # Zen 4 runs AVX-512 on two 256-bit FMA pipes (each 512-bit op takes two passes).
        units, bits, core = 2, 256, "AMD Zen 4 (AVX-512 on 2 x 256-bit FMA pipes)"
    elif "avx512f" in flags:
        units, bits, core = 2, 512, "AVX-512 with 2 x 512-bit FMA units (Xeon/Zen 5)"
    elif "fma" in flags:
        units, bits, core = 2, 256, "AVX2 with 2 x 256-bit FMA units"
    else:
        units, bits, core = 1, 128, "no FMA: 1 x 128-bit SSE unit"
    f32 = units * (bits // 32) * 2 * ghz
    how = (f"{info.get('model name', 'unknown CPU')} ({vendor} family {family:#x}): {core}; "
           f"per core: {units} x {bits // 32} f32 lanes x 2 flops x {ghz:.2f} GHz (the larger "
           f"of cpu MHz in /proc/cpuinfo, {nominal:.2f}, and measured here, {measured:.2f}) "
           f"= {f32:.1f} GFLOP/s f32, {f32 / 2:.1f} f64")
    return ComputePeak(f32, f32 / 2, how)


def copy_bandwidth(nbytes: int, repeat: int) -> float:
    """Best GB/s (bytes read + bytes written) of ``np.copyto`` over ``nbytes`` arrays on
    this core: the memory reference for bandwidth-bound kernels."""
    source = np.ones(nbytes // 8)
    target = np.empty_like(source)
    np.copyto(target, source)
    best = float("inf")
    for _ in range(max(3, repeat)):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / best / 1e9
