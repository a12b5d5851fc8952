"""Fixtures of the trigger tests: contexts and triggers are always shut down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.triggers.recording import Opener, RecordingContext, T
from triggers import CacheReloadTrigger


@pytest.fixture
def make_context() -> Iterator[Callable[..., RecordingContext]]:
    """Build RecordingContexts; each is shut down after the test."""
    made: list[RecordingContext] = []

    def make(*args: Any, **kwargs: Any) -> RecordingContext:
        context = RecordingContext(*args, **kwargs)
        made.append(context)
        return context

    yield make
    for context in made:
        context.shutdown()


@pytest.fixture
def opened() -> Iterator[Opener]:
    """Open a trigger with a context; it is closed after the test even if the test fails."""
    triggers: list[CacheReloadTrigger] = []

    def open_(trigger: T, context: Any) -> T:
        trigger.open(context)
        triggers.append(trigger)
        return trigger

    yield open_
    for trigger in triggers:
        trigger.close()  # bounded by the trigger's close_timeout
