"""Peak memory of the worker that reloads a shared full cache, against the Arrow size of
the table it loads.

For each ``--rows`` N, the Parquet dimension of ``benchmarks/snapshot_open.py`` (N rows
in random key order: ``k`` BIGINT spread over 7N, ``name`` STRING, ``score`` DOUBLE;
``--kind str`` for string keys; ``--kind dup`` for N/4 keys of 4 rows each, a table
that is sorted) is read by a fresh process through
``FullCachingLookupProvider.of(FileSource(path), trigger, key_columns=["k"],
share_across_workers=True, ...)`` with a trigger that fires when told, a version
being due an hour after its load: a first load publishes version 1 and serves it (one
lookup), the cache's clock is moved two hours on, then the peak resident set is
reset (``/proc/self/clear_refs``) and a reload loads, sorts, indexes and publishes
version 2 while version 1 is served. Reported: the resident set before the reload, its
peak during it (``VmHWM``), the peak's growth, and these over the Arrow size of the new
table (``Table.nbytes`` of the snapshot served after it); a thread also samples
``RssAnon`` (private) and ``RssFile`` (mapped file pages) every 5 ms. The peak is also
split in two: while the source is read (``LocalSourceRunner.read_arrow_batches``:
pyarrow decoding Parquet with 4 readers, each batch written to the store's spool as it
arrives) and after (indexing the spooled table, writing the version's file from the
spool, checking and switching).

    .venv/bin/python benchmarks/reload_memory.py [--rows 4000000,16000000] [--kind int|str|dup]

Writes a table to stdout and ``benchmarks/out/reload_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import write_result
from benchmarks.snapshot_open import key_of, write_dimension

ROOT = Path(__file__).resolve().parent.parent


def write_rows(kind: str, rows: int, path: Path) -> None:
    """The dimension of ``kind``: ``snapshot_open``'s, or ``dup``: its integer keys, each
    on 4 rows (``k`` of row ``i`` is the key of ``i mod N/4``)."""
    if kind != "dup":
        write_dimension(kind, rows, path)
        return
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    order = np.random.default_rng(rows).permutation(rows).astype(np.int64)
    names = pc.binary_join_element_wise("name-", pc.cast(pa.array(order), pa.string()), "")
    keys = pa.array(key_of("int", order % (rows // 4)))
    score = pa.array(np.random.default_rng(1).random(rows))
    pq.write_table(pa.table({"k": keys, "name": names, "score": score}), path,
                   row_group_size=1 << 20)


def status() -> dict[str, int]:
    found: dict[str, int] = {}
    with open("/proc/self/status") as file:
        for line in file:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                found[name] = int(value.split()[0]) * 1024
    return found


def child(path: str, store: str, kind: str, rows: int) -> None:
    from lookup import FullCachingLookupProvider, open_lookup
    from scan import FileSource, LocalSourceRunner
    from triggers import CacheReloadTrigger, ReloadContext

    read_batches = LocalSourceRunner.read_arrow_batches
    reads: list[dict[str, int]] = []  # per load: the peak and the resident set as it ended

    def reading(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The read of a load (pyarrow decoding Parquet, the batches spooled as they
        # come): its peak apart from the rest's (a load's peak is the larger of both).
        yield from read_batches(self, *args, **kwargs)
        now = status()
        reads.append({"peak": now["VmHWM"], "end": now["VmRSS"]})
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")

    LocalSourceRunner.read_arrow_batches = reading  # type: ignore[method-assign]

    class Hourly(CacheReloadTrigger):
        """Fires only when told; a version is due an hour after its load."""

        def open(self, context: ReloadContext) -> None:
            pass

        def close(self) -> None:
            pass

        def next_reload_after(self, loaded_at: datetime) -> datetime:
            return loaded_at + timedelta(hours=1)

    provider = FullCachingLookupProvider.of(
        FileSource(path), Hourly(), key_columns=["k"], share_across_workers=True,
        snapshot_dir=store, snapshot_name=f"reload-{kind}-{rows}-{os.getpid()}")
    key = (key_of("str" if kind == "str" else "int", rows // 5),)
    with open_lookup(provider) as handle:
        runtime: Any = handle.runtime
        start_rss = status()["VmRSS"]
        runtime.trigger_reload().result()
        first_peak = max(status()["VmHWM"], reads[0]["peak"])
        assert handle.lookup_batch([key])[key]
        time.sleep(0.5)
        # Two hours later on the cache's clock: version 1 is due, the firing reloads
        # (the file touched: a source that knows its version must not skip the load).
        runtime.cache.clock = lambda: time.time() + 7200
        os.utime(path)
        before = status()
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")  # reset VmHWM to the current resident set
        peaks = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.005):
                now = status()
                for name in peaks:
                    peaks[name] = max(peaks[name], now[name])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.perf_counter()
        runtime.trigger_reload().result()
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        after = status()
        snapshot = runtime.cache.snapshot()
        assert snapshot.version == 2, snapshot.version
        assert handle.lookup_batch([key])[key]
        arrow = int(snapshot.table.nbytes)
    read = reads[-1]
    peak = max(after["VmHWM"], read["peak"])
    print("RESULT " + json.dumps({
        "arrow_bytes": arrow, "rss_before": before["VmRSS"], "peak": peak,
        "grown": peak - before["VmRSS"], "sampled": peaks, "seconds": seconds,
        "first_load": {"rss_before": start_rss, "peak": first_peak,
                       "grown": first_peak - start_rss},
        "read_peak": read["peak"], "read_end": read["end"],
        "build_publish_peak": after["VmHWM"],
        "before": before}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="4000000,16000000")
    parser.add_argument("--kind", default="int", choices=["int", "str", "dup"])
    parser.add_argument("--dir", default="/tmp/spark-lookup-open")
    args = parser.parse_args()
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    results: dict[str, Any] = {}
    for rows in [int(r) for r in args.rows.split(",")]:
        path = base / f"{args.kind}-{rows}.parquet"
        if not path.exists():
            write_rows(args.kind, rows, path)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(path), str(base / "reload-stores"),
             args.kind, str(rows)], capture_output=True, text=True, env=env, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            raise RuntimeError(done.stderr[-3000:])
        results[str(rows)] = json.loads(lines[-1][len("RESULT "):])
    print(f"{'rows':>10} {'Arrow MB':>9} {'RSS before':>11} {'peak RSS':>9} {'grown':>8} "
          f"{'peak/Arrow':>11} {'grown/Arrow':>12} {'anon peak':>10} {'file peak':>10} {'s':>6}")
    for rows, r in results.items():
        mb = 1e6
        print(f"{rows:>10} {r['arrow_bytes'] / mb:9.0f} {r['rss_before'] / mb:11.0f} "
              f"{r['peak'] / mb:9.0f} {r['grown'] / mb:8.0f} "
              f"{r['peak'] / r['arrow_bytes']:11.2f} {r['grown'] / r['arrow_bytes']:12.2f} "
              f"{r['sampled']['RssAnon'] / mb:10.0f} {r['sampled']['RssFile'] / mb:10.0f} "
              f"{r['seconds']:6.1f}")
    print("the reload in two parts: reading (pyarrow decoding Parquet, the batches spooled) "
          "and the rest (indexing, writing, checking, switching), peak growth over the "
          "RSS before the reload:")
    for rows, r in results.items():
        read, rest = r["read_peak"] - r["rss_before"], r["build_publish_peak"] - r["rss_before"]
        left = r["read_end"] - r["rss_before"]
        print(f"{rows:>10} read: peak {read / 1e6:.0f} MB = {read / r['arrow_bytes']:.2f}x "
              f"Arrow, {left / 1e6:.0f} MB left when it returns; the rest: peak "
              f"{rest / 1e6:.0f} MB = {rest / r['arrow_bytes']:.2f}x Arrow "
              f"({(rest - left) / 1e6:+.0f} MB over what the read left)")
    print("first load (the same process, before the reload):")
    for rows, r in results.items():
        first = r["first_load"]
        print(f"{rows:>10} RSS before {first['rss_before'] / 1e6:.0f} MB, peak "
              f"{first['peak'] / 1e6:.0f} MB, grown {first['grown'] / 1e6:.0f} MB = "
              f"{first['grown'] / r['arrow_bytes']:.2f}x Arrow")
    print(f"load average: {os.getloadavg()}")
    write_result(f"reload_memory_{args.kind}", {"results": results, "loadavg": os.getloadavg()})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
