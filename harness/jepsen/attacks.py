"""Every attack the harness knows, by name: the hostile clients (``harness.jepsen.hostile``) and
the amplifications of issue 56 (``harness.jepsen.amplify``).  The fault harness's ``clients``
nemesis, the hostile script and the generative adversary all draw from this one list."""

from __future__ import annotations

from collections.abc import Callable

from harness.jepsen import amplify, hostile

ATTACKS: dict[str, Callable[..., hostile.Outcome]] = {**hostile.ATTACKS, **amplify.ATTACKS}
