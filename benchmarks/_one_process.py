"""Runs benchmark scripts one after the other in this one process: what ``run_all.py
--quick`` does with its Spark scripts, so that they share one JVM. PySpark keeps the JVM
it launched after ``SparkSession.stop()``; the next script's session starts in it in
about a second, where a JVM of its own took 10-20 s to start on 2 CPUs. (JVM options,
such as a quick run's C1-only compiler, are the first script's.)

    python benchmarks/_one_process.py STATUS_JSON SPEC_JSON

``SPEC_JSON`` is a JSON list of ``[name, path, [arguments]]``. Each script runs as
``__main__`` with ``sys.argv`` set to its path and arguments, its output streaming
through; after each, ``STATUS_JSON`` is rewritten with ``{name: {"status", "returncode",
"seconds"}}`` of the scripts run so far (so a run stopped by a timeout still tells which
finished). Exits 1 when any script failed.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def run_script(path: str, arguments: list[str]) -> int:
    """Run ``path`` as ``__main__``; its exit code (an exception is 1, and printed)."""
    saved = sys.argv
    sys.argv = [path, *arguments]
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # SystemExit("message"), as the interpreter does
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved
        sys.stdout.flush()
        sys.stderr.flush()


def main() -> None:
    status_path = Path(sys.argv[1])
    spec: list[tuple[str, str, list[str]]] = json.loads(sys.argv[2])
    statuses: dict[str, dict[str, Any]] = {}
    for name, path, arguments in spec:
        shown = " ".join([".venv/bin/python", f"benchmarks/{name}.py", *arguments])
        print(f"\n=== {shown} (in one process with the scripts before it)", flush=True)
        started = time.perf_counter()
        code = run_script(path, arguments)
        statuses[name] = {"status": "ok" if code == 0 else "failed", "returncode": code,
                          "seconds": round(time.perf_counter() - started, 1)}
        status_path.write_text(json.dumps(statuses))
    if any(entry["returncode"] for entry in statuses.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
