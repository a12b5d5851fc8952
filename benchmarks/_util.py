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


def local_spark(app: str, quick: bool = False, **conf: str) -> Any:
    """The benchmarks' SparkSession: ``local[2]``, no UI, two shuffle partitions, 2 GB of
    driver memory, Python workers on this interpreter (it has the project installed),
    plus ``conf``. ``quick``: a smoke run measures nothing worth JIT-compiling well, and
    the C1 compiler only and the serial GC start the JVM about a third faster on 2 CPUs."""
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if quick:
        builder = builder.config("spark.driver.extraJavaOptions",
                                 "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    builder = (builder.master("local[2]").appName(f"spark-lookup-{app}")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "2g"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
