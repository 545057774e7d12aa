"""The deterministic simulator: the server's engine and effect executor over a seeded network,
disk and clock.

``run(seed) -> Result``; ``python -m zabby.sim --seed N`` replays one seed, ``--seeds A..B``
sweeps a range.  See ``runner`` for the phases and ``checkers`` for the invariants.
"""

from zabby.sim.runner import Result, run

__all__ = ["Result", "run"]
