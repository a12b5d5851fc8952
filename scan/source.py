"""The source interface (Flink's ``Source``): a factory of enumerators and readers."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Generic

from scan.split import EnumStateT, SplitT
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_instance

if TYPE_CHECKING:
    from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
    from scan.reader import SourceReader, SourceReaderContext
    from scan.serializers import SimpleVersionedSerializer

__all__ = ["Boundedness", "EnumStateT", "Source", "SplitT", "check_bounded"]



class Boundedness(enum.Enum):
    """Whether a source ends (``BOUNDED``: a table, a set of files) or not."""

    BOUNDED = "BOUNDED"
    CONTINUOUS_UNBOUNDED = "CONTINUOUS_UNBOUNDED"


class Source(ABC, Generic[SplitT, EnumStateT]):
    """A split-based source of rows (tuples in the order of [`schema`][]).

    A source is configuration only: it is built on the driver, pickled to wherever it
    runs, and holds no open clients. It creates the two halves of a read, which run in
    different places:

    - one [`SplitEnumerator`][] (the coordinator: the driver when Spark plans a
      read, the runner's own thread locally) that discovers splits and hands them to
      readers on request;
    - one [`SourceReader`][] per parallel subtask (an executor task in Spark, a
      reader of [`LocalSourceRunner`][] locally) that reads the splits it is
      given.

    Both halves open their clients themselves, where they run. Subclasses must keep
    every attribute picklable.

    Splits and enumerator state are written into checkpoints through the versioned
    serializers [`split_serializer`][] and [`enumerator_state_serializer`][],
    never with pickle.
    """

    @property
    @abstractmethod
    def boundedness(self) -> Boundedness:
        """Whether the source ends."""

    @property
    @abstractmethod
    def schema(self) -> Any:
        """The schema of the rows: a Spark DDL string or a ``StructType``.

        Known on the driver before any row is read, so a schema mismatch fails at
        planning. A source may look it up (a table's catalog), once.
        """

    @abstractmethod
    def create_enumerator(
        self, context: SplitEnumeratorContext[SplitT]
    ) -> SplitEnumerator[SplitT, EnumStateT]:
        """A new enumerator for a fresh read; runs on the coordinator."""

    @abstractmethod
    def restore_enumerator(
        self, context: SplitEnumeratorContext[SplitT], state: EnumStateT
    ) -> SplitEnumerator[SplitT, EnumStateT]:
        """An enumerator that continues from ``state`` (from a checkpoint)."""

    @abstractmethod
    def create_reader(self, context: SourceReaderContext) -> SourceReader[SplitT]:
        """A new reader for one parallel subtask; runs where that subtask runs.

        The reader must be able to read any split of this source given just the split
        (no enumerator needed), which is how a split planned on the driver is read on an
        executor.
        """

    @property
    @abstractmethod
    def split_serializer(self) -> SimpleVersionedSerializer[SplitT]:
        """The versioned serializer of this source's splits (for checkpoints)."""

    @property
    @abstractmethod
    def enumerator_state_serializer(self) -> SimpleVersionedSerializer[EnumStateT]:
        """The versioned serializer of this source's enumerator state (for checkpoints)."""

    def limit_connections(self, budget: ConnectionBudget | None) -> bool:
        """Open this process's connections to the backend (planning, reading) under
        ``budget`` (each holding a slot of the host while open;
        `spark_lookup.connection_budget`). Returns whether the source does: the SQL and
        Redis sources do; by default (files, a custom source) nothing is limited."""
        return False

    def current_version(self) -> Hashable | None:
        """The version of the data a read would see now, or None when unknown.

        Runs where reads are planned (the driver, a full cache's loading thread),
        before a read, and must be cheap next to the read itself (a table's log or
        catalog entry, never its data). A full cache and a refreshed view compare it
        with the version their current snapshot was loaded at and skip the reload
        when it is equal; None (the default: a source that cannot tell) always loads.

        The value identifies the version by its ``repr`` (an int, a str, a tuple of
        them), which is what a host's snapshot store records. A read started after
        this call sees this version or a newer one, so an equal version never hides
        a change. It may raise what a read raises (a missing table, a transient error).
        """
        return None


def check_bounded(source: object, user: str) -> Source[Any, Any]:
    """``source`` if it is a bounded [`Source`][]; else a ConfigError saying that
    ``user`` (what reads it whole) needs one."""
    checked: Source[Any, Any] = check_instance(source, Source, "source", "a scan.Source")
    if checked.boundedness is not Boundedness.BOUNDED:
        raise ConfigError(f"source {type(source).__name__} is unbounded; {user} needs a "
                          "bounded source (a table, a set of files)")
    return checked
