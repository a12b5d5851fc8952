"""SplitListSource: a custom source from its schema, splits and ``read``, with checkpoints
and restore exactly once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from scan import LocalSourceRunner, ReaderOptions, SourceSplit, SplitListSource, read_arrow
from spark_lookup.errors import SourceError


@dataclass(frozen=True)
class Range(SourceSplit):
    """Numbers ``first`` to ``last`` (exclusive), tagged; ``skip`` of them emitted."""

    first: int
    last: int
    tag: tuple[str, bytes] = ("t", b"\xff")
    skip: int = 0

    @property
    def split_id(self) -> str:
        return f"range-{self.first}"


class Numbers(SplitListSource[Range]):
    """Rows (n, n * n) in ranges of 10; every third range comes as Arrow, its columns in
    another order and another integer type (cast to the schema)."""

    schema = "n BIGINT, square BIGINT"

    def __init__(self, ranges: int = 5) -> None:
        self.ranges = ranges
        self.closed: list[int] = []

    def splits(self) -> list[Range]:
        return [Range(10 * i, 10 * i + 10) for i in range(self.ranges)]

    def read(self, split: Range) -> Iterator[Any]:
        assert split.tag == ("t", b"\xff")  # read back from a checkpoint as written
        numbers = range(split.first + split.skip, split.last)
        try:
            if split.first % 30 == 20:
                for start in range(0, len(numbers), 4):
                    part = list(numbers[start:start + 4])
                    yield pa.record_batch({"square": pa.array([n * n for n in part], pa.int32()),
                                           "n": pa.array(part, pa.int32())})
            else:
                yield from ((n, n * n) for n in numbers)
        finally:
            self.closed.append(split.first)


ALL = [(n, n * n) for n in range(50)]


def test_reads_every_split() -> None:
    source = Numbers()
    with LocalSourceRunner(source, parallelism=2) as runner:
        assert sorted(runner.run()) == ALL
    assert sorted(source.closed) == [0, 10, 20, 30, 40]
    assert read_arrow(Numbers(), 3).sort_by("n").to_pylist() == [
        {"n": n, "square": s} for n, s in ALL]


@pytest.mark.parametrize("after", [3, 15, 24, 37])
def test_a_checkpoint_restores_exactly_once(after: int) -> None:
    options = ReaderOptions(records_per_poll=1)
    with LocalSourceRunner(Numbers(), 1, options=options) as runner:
        first = runner.run(after)
        checkpoint = runner.checkpoint()
    with LocalSourceRunner(Numbers(), 2, restore_from=checkpoint) as runner:
        rest = runner.run()
    assert sorted(first + rest) == ALL


def test_rows_and_arrow_mix_within_a_split() -> None:
    class Mixed(Numbers):
        def read(self, split: Range) -> Iterator[Any]:
            yield (split.first, split.first ** 2)
            yield pa.table({"n": [split.first + 1], "square": [(split.first + 1) ** 2]})
            yield from ((n, n * n) for n in range(split.first + 2, split.last))

    assert sorted(read_arrow(Mixed(2), 1).to_pylist(), key=lambda r: r["n"]) == [
        {"n": n, "square": s} for n, s in ALL[:20]]


def test_a_row_that_does_not_convert_names_the_source() -> None:
    class Bad(Numbers):
        def read(self, split: Range) -> Sequence[Any]:
            return [(1, "not a number")]

    with pytest.raises(SourceError, match="Bad"):
        read_arrow(Bad(1), 1)


def test_the_split_type_is_checked_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match="names no split type"):
        class Unnamed(SplitListSource):  # type: ignore[type-arg]
            schema = "n BIGINT"

            def splits(self) -> list[Any]:
                return []

            def read(self, split: Any) -> list[Any]:
                return []

    @dataclass(frozen=True)
    class Whole(SourceSplit):
        number: int

        @property
        def split_id(self) -> str:
            return str(self.number)

    with pytest.raises(TypeError, match="no field 'skip'"):
        class Unresumable(SplitListSource[Whole]):
            schema = "n BIGINT"

            def splits(self) -> list[Whole]:
                return []

            def read(self, split: Whole) -> list[Any]:
                return []
