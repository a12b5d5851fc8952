"""Shared helpers of the benchmark scripts: interleaved repetitions and result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "out"


def interleaved(cases: dict[str, Callable[[], int]], repeats: int) -> dict[str, list[float]]:
    """Run every case once per round, ``repeats`` rounds; each case returns the number of
    operations it did. Returns operations per second of every run, per case."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, case in cases.items():
            start = time.perf_counter()
            ops = case()
            rates[name].append(ops / (time.perf_counter() - start))
    return rates


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str))
    return path
