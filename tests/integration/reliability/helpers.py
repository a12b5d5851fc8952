"""Helpers of the reliability tests. Some travel to Spark's Python workers inside a
provider (the retry policy's sleep), so they live in an importable module and pickle
as plain data."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any


class FileRecordingSleep:
    """A retry policy's ``sleep`` that really sleeps and appends each wait to a file.

    Picklable (a path): in a Spark Python worker it records there, and the test reads
    the file to know that a retry is under way (the moment to end an outage)."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)

    def __call__(self, seconds: float) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(f"{seconds}\n")
        time.sleep(seconds)

    def waits(self) -> list[float]:
        try:
            with open(self.path, encoding="utf-8") as recorded:
                return [float(line) for line in recorded if line.strip()]
        except FileNotFoundError:
            return []


class Inbox:
    """The input directory of a streaming file source. Files appear atomically: written
    in a staging directory, then renamed in, so a micro-batch never reads half a file."""

    def __init__(self, root: Path) -> None:
        self.path = root / "inbox"
        self._staging = root / "staging"
        self.path.mkdir(parents=True)
        self._staging.mkdir(parents=True)
        self.rows: list[dict[str, Any]] = []
        self._files = 0

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        name = f"part-{self._files:04d}.json"
        self._files += 1
        staged = self._staging / name
        staged.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        os.replace(staged, self.path / name)
        self.rows.extend(rows)

    def add_text(self, text: str) -> None:
        """A file of raw text (say, empty, or blank lines): no rows."""
        name = f"part-{self._files:04d}.json"
        self._files += 1
        staged = self._staging / name
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, self.path / name)


def orders(ids: Iterable[int | None], first_order: int) -> list[dict[str, Any]]:
    """Stream rows ``{"order_id", "customer_id"}``, order ids counting from ``first_order``."""
    return [{"order_id": first_order + i, "customer_id": c} for i, c in enumerate(ids)]


def expected_left_join(
    stream: Iterable[dict[str, Any]], dimension: Iterable[tuple[Any, ...]]
) -> Counter[tuple[Any, ...]]:
    """The multiset of ``(order_id, customer_id, name)`` a left lookup join must output:
    one row per matching dimension row, one with a null name when none matches (a null
    key never matches)."""
    by_id: dict[Any, list[Any]] = {}
    for key, name in dimension:
        by_id.setdefault(key, []).append(name)
    out: Counter[tuple[Any, ...]] = Counter()
    for row in stream:
        key = row["customer_id"]
        names = by_id.get(key, []) if key is not None else []
        for name in names or [None]:
            out[(row["order_id"], key, name)] += 1
    return out


def multiset(rows: Iterable[Any]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row) for row in rows)


def after_retry(sleep: FileRecordingSleep, action: Callable[[], Any], *, seen: int = 0,
                timeout: float = 90) -> threading.Thread:
    """Run ``action`` (ending an outage) in a thread of its own as soon as ``sleep`` has
    recorded more than ``seen`` retries, or after ``timeout`` seconds at the latest: the
    outage lasts until a lookup has certainly failed, and no longer than the retries
    can wait."""

    def run() -> None:
        deadline = time.monotonic() + timeout
        while len(sleep.waits()) <= seen and time.monotonic() < deadline:
            time.sleep(0.01)
        action()

    thread = threading.Thread(target=run, name="end-outage", daemon=True)
    thread.start()
    return thread


class Sentinel:
    """Unpickling this creates ``path``: a pickle payload whose side effect shows if
    anything ever unpickles it (in this process or in a Spark worker)."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return (Path.touch, (Path(self.path),))


def json_bomb(depth: int) -> bytes:
    """A JSON array nested ``depth`` levels deep."""
    return b"[" * depth + b"]" * depth
