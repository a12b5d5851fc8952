"""What the snapshot store's integrity checks cost: publish and warm start, with and
without them, on one table, in one run.

The table is ``--rows`` rows sorted by ``id`` (BIGINT) with a name (STRING) and a score
(DOUBLE), as a full cache publishes it. Cases, interleaved, ``--repeats`` rounds:

- ``publish``: ``SnapshotStore.publish`` (``validate(full=True)`` in memory, write
  with a running CRC-32, fsync, read back by reads and compared, rename, pointer),
  against ``write only`` (the same Arrow IPC write and fsync, nothing checked);
- ``warm start``: ``SnapshotStore.read_latest`` (CRC-32 of the file, by reads, then map
  and read), as the first reader of a version on a host does; ``warm start, checked
  before``: the same for a later reader (the check is recorded in ``VERIFIED`` with the
  file's identity: one ``stat``); against ``map only`` (``pa.memory_map`` +
  ``read_all``, nothing checked); both with the file's pages in the page cache (the case
  of a worker starting right after another published), and ``index``
  (``FullSnapshot.from_sorted``: what a reader of a version published without an index
  builds) for scale.

    .venv/bin/python benchmarks/snapshot_check.py [--rows 4000000] [--repeats 5] [--quick]

Writes a table to stdout and ``benchmarks/out/snapshot_check.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import median, write_result
from cache.full.snapshot import FullSnapshot
from cache.full.store import SnapshotStore


def table(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "name": pa.array([f"customer-{i}" for i in range(rows)]),
        "score": pa.array(rng.random(rows)),
    })


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def one_round(store: SnapshotStore, data: pa.Table, version: int, plain: Path) -> dict[str, float]:
    """Seconds of every case, once."""

    def publish() -> None:
        with store.try_lock() as locked:
            assert locked
            store.publish(data, version=version, loaded_at=time.time(), unique=True)

    def write_only() -> None:
        with pa.OSFile(str(plain), "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
            writer.write_table(data)
        fd = os.open(plain, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    took = {"publish": timed(publish), "write only": timed(write_only)}
    found = store.read_latest()
    assert found is not None
    record, mapped = found
    assert mapped.num_rows == data.num_rows
    path = str(store.directory / record.file)
    # The first reader of a version on a host checks its checksums (and records it in
    # VERIFIED); later readers of the same unchanged files do not read them again.
    (store.directory / "VERIFIED").unlink(missing_ok=True)
    took["warm start"] = timed(store.read_latest)
    took["warm start, checked before"] = timed(store.read_latest)
    took["map only"] = timed(lambda: pa.ipc.open_file(pa.memory_map(path, "r")).read_all())
    took["index"] = timed(lambda: FullSnapshot.from_sorted(
        mapped, ["id"], loaded_at=record.loaded_at, unique=True))
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100k rows, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 100_000, 3
    data = table(args.rows)
    seconds: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(Path(tmp) / "store", fingerprint="bench")
        store.attach()
        try:
            for version in range(1, args.repeats + 1):
                for name, value in one_round(store, data, version, Path(tmp) / "plain").items():
                    seconds.setdefault(name, []).append(value)
        finally:
            store.detach()
    med = {name: median(values) for name, values in seconds.items()}
    mib = data.nbytes / 2**20
    print(f"{args.rows:,} rows, {mib:.0f} MiB as Arrow; median of {args.repeats} rounds")
    for name, value in med.items():
        print(f"  {name:<11} {value * 1000:9.1f} ms")
    publish_ratio = med["publish"] / med["write only"]
    start_ratio = (med["warm start"] + med["index"]) / (med["map only"] + med["index"])
    print(f"  checks add {(med['publish'] - med['write only']) * 1000:.0f} ms to a publish "
          f"({publish_ratio:.2f}x) and {(med['warm start'] - med['map only']) * 1000:.0f} ms "
          f"to a warm start ({start_ratio:.2f}x with the index)")
    write_result("snapshot_check", {
        "rows": args.rows, "arrow_mib": mib, "repeats": args.repeats,
        "seconds": seconds, "median_seconds": med})


if __name__ == "__main__":
    main()
