"""A base for objects that ship to executors as their configuration only."""

from __future__ import annotations

from typing import Any

__all__ = ["PerProcess"]


class PerProcess:
    """Pickles without the attributes named in ``_PER_PROCESS`` (locks, clients,
    counters), which `_init_per_process` builds again wherever the object arrives."""

    _PER_PROCESS: tuple[str, ...] = ()

    def _init_per_process(self) -> None:
        """Set every attribute of ``_PER_PROCESS`` to its fresh value."""
        for name in self._PER_PROCESS:
            setattr(self, name, None)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._PER_PROCESS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_per_process()
