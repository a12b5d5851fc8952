"""A fake monotonic clock for deterministic TTL and schedule tests (no sleeping)."""

from __future__ import annotations


class FakeTimer:
    """A picklable monotonic clock in seconds that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> float:
        """Advance the clock and return the new time."""
        self.now += seconds
        return self.now
