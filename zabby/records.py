"""``immutable``: the dataclass of the records the write path makes for every message and batch.

A frozen dataclass sets each field through ``object.__setattr__``: a quorum ``Request`` took
0.71 µs to make, against 0.16 µs for the same class unfrozen, and every forwarded write makes
one on its learner, its ``Send`` effect, and decodes one on the leader.  ``immutable`` makes a
slotted dataclass that the type checker holds frozen (``dataclass_transform``: assigning a
field is a type error) and that Python does not; equal records hash alike, as frozen ones do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

_R = TypeVar("_R")


@dataclass_transform(frozen_default=True)
def immutable(cls: type[_R]) -> type[_R]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
