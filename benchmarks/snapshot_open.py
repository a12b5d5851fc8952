"""What a new Python worker pays to serve a published host snapshot: time to its first
answer and private memory, against the same worker over a 1,000-key table.

For each dimension (``--cases``: ``int:<rows>`` integer keys, ``str:<rows>`` string
keys; ``int:1000`` is the baseline), a Parquet file of ``rows`` rows in random key order
(``k``: BIGINT spread over 7x its count, so hashed, not dense; or STRING
``key-<9 digits>``; plus ``name`` STRING and ``score`` DOUBLE) is written once, and one
process opens it with ``FullCachingLookupProvider.of(FileSource(path), trigger,
key_columns=["k"], share_across_workers=True, snapshot_dir=..., snapshot_name=...)``:
it loads, sorts, indexes and publishes the snapshot, and exits. Then ``--runs`` fresh
processes each import the library, and measure from building the provider to the
answer of ``open_lookup(provider).lookup_batch([key])``: the seconds, and the growth
of ``/proc/self/smaps_rollup`` Private_Clean + Private_Dirty (USS) over the same
interval, and the USS after the answer. The medians are reported beside the
baseline's, and the differences. A companion process imports the same libraries for
the whole run, so that their code pages are shared in every measured process alike
(a process alone mapping ``libarrow`` counts its pages as Private_Clean). Every case
looks up a key that exists (checked).

    .venv/bin/python benchmarks/snapshot_open.py [--cases int:1000,int:1000000,...]
        [--runs 5] [--dir /tmp/spark-lookup-open]

Writes a table to stdout and ``benchmarks/out/snapshot_open.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import median, write_result

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = "int:1000,int:1000000,int:4000000,int:16000000,str:1000000,str:4000000"


def uss_bytes() -> int:
    total = 0
    with open("/proc/self/smaps_rollup") as file:
        for line in file:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def key_of(kind: str, i: int) -> Any:
    return i * 7 + 3 if kind == "int" else f"key-{i:09d}"


def write_dimension(kind: str, rows: int, path: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    order = np.random.default_rng(rows).permutation(rows).astype(np.int64)
    numbers = pa.array(order)
    if kind == "int":
        keys: pa.Array = pa.array(order * 7 + 3)
    else:
        keys = pc.binary_join_element_wise(
            "key-", pc.utf8_lpad(pc.cast(numbers, pa.string()), 9, "0"), "")
    names = pc.binary_join_element_wise("name-", pc.cast(numbers, pa.string()), "")
    score = pa.array(np.random.default_rng(1).random(rows))
    pq.write_table(pa.table({"k": keys, "name": names, "score": score}), path,
                   row_group_size=1 << 20)


def child(path: str, store: str, name: str, kind: str, probe: int) -> None:
    """One worker: open the published snapshot, answer one key; print a JSON line."""
    from datetime import timedelta

    from lookup import FullCachingLookupProvider, open_lookup
    from scan import FileSource
    from triggers import PeriodicCacheReloadTrigger

    before = uss_bytes()
    start = time.perf_counter()
    provider = FullCachingLookupProvider.of(
        FileSource(path), PeriodicCacheReloadTrigger(timedelta(hours=1)), key_columns=["k"],
        share_across_workers=True, snapshot_dir=store, snapshot_name=name)
    key = (key_of(kind, probe),)
    with open_lookup(provider) as handle:
        found = handle.lookup_batch([key])
        seconds = time.perf_counter() - start
        after = uss_bytes()
        assert found[key], found
        assert found[key][0][0] == key[0], found
    print("RESULT " + json.dumps({"seconds": seconds, "grown": after - before, "uss": after}))


def run_child(path: Path, store: Path, name: str, kind: str, probe: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(path), str(store), name, kind, str(probe)],
        capture_output=True, text=True, env=env, check=False, timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"worker failed: {done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(lines[-1][len("RESULT "):])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/spark-lookup-open")
    args = parser.parse_args()
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = base / "stores"
    results: dict[str, dict[str, Any]] = {}
    # A process holding the same libraries for the whole run: their pages are then shared
    # in every measured process alike, not private to whichever runs alone.
    companion = subprocess.Popen(
        [sys.executable, "-c", "import lookup, scan, triggers, sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for case in args.cases.split(","):
        kind, rows_text = case.split(":")
        rows = int(rows_text)
        path = base / f"{kind}-{rows}.parquet"
        if not path.exists():
            write_dimension(kind, rows, path)
        name = f"open-{kind}-{rows}"
        # The loader: loads, sorts, indexes and publishes (its figures are not reported).
        run_child(path, store, name, kind, rows // 2)
        files = sorted((store / name).glob("v*"))
        runs = [run_child(path, store, name, kind, (rows * (i + 1)) // (args.runs + 2))
                for i in range(args.runs)]
        results[case] = {
            "rows": rows, "files": {f.name: f.stat().st_size for f in files},
            "seconds": median([r["seconds"] for r in runs]),
            "grown": median([r["grown"] for r in runs]),
            "uss": median([r["uss"] for r in runs]), "runs": runs,
        }
    companion.kill()
    companion.wait()
    base_case = results.get("int:1000")
    print(f"{'case':>14} {'files MB':>9} {'first answer s':>15} {'USS grown MB':>13} "
          f"{'USS MB':>8} {'+s vs 1k':>9} {'+USS MB vs 1k':>14}")
    for case, r in results.items():
        size = sum(r["files"].values()) / 1e6
        extra_s = r["seconds"] - base_case["seconds"] if base_case else float("nan")
        extra_mb = (r["uss"] - base_case["uss"]) / 1e6 if base_case else float("nan")
        print(f"{case:>14} {size:9.1f} {r['seconds']:15.3f} {r['grown'] / 1e6:13.1f} "
              f"{r['uss'] / 1e6:8.1f} {extra_s:9.3f} {extra_mb:14.1f}")
    print(f"load average: {os.getloadavg()}")
    write_result("snapshot_open", {"runs": args.runs, "results": results,
                                   "loadavg": os.getloadavg()})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        main()
