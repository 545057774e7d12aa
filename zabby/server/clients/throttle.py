"""Guessing slowed by source address: a token bucket per client host, for every attempt at a
secret (a SASL response, an admin's HTTP Basic credentials).

A delay per connection slows nothing: a guesser opens a thousand connections, and as a right
answer came at once, silence after a few milliseconds already meant "wrong".  So the bucket
is taken *before* the secret is looked at, whatever the answer will be: a source over its
rate is refused at once, unread, and neither the refusal nor its timing says anything of the
password.  Sources are kept in a bounded table (the least recently seen go first): a flood of
made-up addresses costs a fixed amount of memory.
"""

from __future__ import annotations

from collections import OrderedDict

ATTEMPTS_PER_S = 5.0  # the rate a source may keep up
ATTEMPTS_BURST = 20.0  # and what it may spend at once (a few clients restarting together)
SOURCES_MAX = 4096


class GuessThrottle:
    def __init__(self, rate_per_s: float = ATTEMPTS_PER_S, burst: float = ATTEMPTS_BURST, sources_max: int = SOURCES_MAX) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.sources_max = sources_max
        self.refused = 0
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()  # source → [tokens, when counted]

    def attempt(self, source: str, now_s: float) -> bool:
        """Whether ``source`` may try a secret now (a token is taken); False: refuse it unread."""
        bucket = self._buckets.get(source)
        if bucket is None:
            if len(self._buckets) >= self.sources_max:
                self._buckets.popitem(last=False)
            bucket = self._buckets[source] = [self.burst, now_s]
        else:
            self._buckets.move_to_end(source)
            bucket[0] = min(self.burst, bucket[0] + (now_s - bucket[1]) * self.rate_per_s)
            bucket[1] = now_s
        if bucket[0] < 1.0:
            self.refused += 1
            return False
        bucket[0] -= 1.0
        return True

    def __len__(self) -> int:
        return len(self._buckets)
