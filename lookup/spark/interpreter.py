"""Which Python a local Spark starts its workers with, checked before a join is built.

A classic session's Python workers run ``PYSPARK_PYTHON`` as it was when the session
started, else ``python3`` from ``PATH``. A script run with a virtualenv's interpreter
(``.venv/bin/python job.py``) without activating the virtualenv starts the system's
``python3``, which has neither this library nor the user's code: every task then failed
after about 30 s with ``ModuleNotFoundError: No module named 'lookup'`` (the worker
retried first). The check below finds that on the driver, at once, and says how to fix it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import lru_cache
from typing import Any

from lookup.spark.session import is_connect
from spark_lookup.errors import ConfigError

__all__ = ["check_worker_python"]

_PACKAGES = ("cache", "connectors", "lookup", "scan", "spark_lookup", "triggers")


def check_worker_python(spark: Any) -> None:
    """Raise [`ConfigError`][] when a classic local session's workers
    would start a Python that cannot import spark-lookup. Runs on the driver.

    Only a classic session whose master is ``local[...]`` is checked, and only when
    ``PYSPARK_PYTHON`` is not set (then its workers start ``python3`` from ``PATH``, in
    this process's environment); elsewhere the executors' Python is the deployment's.
    """
    if is_connect(spark) or os.environ.get("PYSPARK_PYTHON"):
        return
    master = str(spark.conf.get("spark.master", ""))
    if not master.startswith("local"):
        return
    problem = _worker_python_problem(shutil.which("python3"), sys.executable)
    if problem is not None:
        raise ConfigError(
            f"Spark's Python workers would start {problem}, while this driver runs "
            f"{sys.executable}: PYSPARK_PYTHON is not set, so a local session starts "
            "'python3' from PATH. Set it to the driver's interpreter before the session "
            "starts: `os.environ['PYSPARK_PYTHON'] = sys.executable` at the top of the "
            "script (or activate the virtualenv, or export PYSPARK_PYTHON); see the "
            "README, \"Your first script\""
        )


@lru_cache(maxsize=8)
def _worker_python_problem(worker: str | None, driver: str) -> str | None:
    """What is wrong with ``worker`` as the workers' Python (None: nothing). Asked once
    per interpreter and process: it starts that interpreter (about 0.1 s)."""
    if worker is None:
        return "'python3', which is not on PATH"
    if os.path.dirname(os.path.abspath(worker)) == os.path.dirname(os.path.abspath(driver)):
        return None  # the driver's own environment (a virtualenv's bin/, say)
    probe = subprocess.run(  # noqa: S603 - the interpreter Spark itself would start
        [worker, "-c", f"import {', '.join(_PACKAGES)}"],
        capture_output=True, timeout=60, check=False, env=os.environ.copy())
    if probe.returncode == 0:
        return None
    return f"{worker!r}, which cannot import spark-lookup"
