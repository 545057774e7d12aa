"""Session expiry, bucketed by tick as ZooKeeper's ``ExpiryQueue`` does.

A session touched at time t with timeout T expires at the first bucket boundary at or after
t + T (boundaries are multiples of the tick), so the tracker only has to look at one bucket
per tick, and a touch moves a session only when its bucket changes.  Time is passed in.
"""

from __future__ import annotations


class SessionTracker:
    def __init__(self, tick_ms: int) -> None:
        self.tick_ms = tick_ms
        self.timeouts: dict[int, int] = {}
        self._bucket_of: dict[int, int] = {}
        self._buckets: dict[int, set[int]] = {}
        self._next_check_ms = 0

    def _bucket(self, time_ms: int) -> int:
        return (time_ms // self.tick_ms + 1) * self.tick_ms

    def add(self, session_id: int, timeout_ms: int, now_ms: int) -> None:
        self.timeouts[session_id] = timeout_ms
        self.touch(session_id, now_ms)

    def touch(self, session_id: int, now_ms: int) -> bool:
        """Push the session's expiry out; False if the tracker does not know it."""
        timeout_ms = self.timeouts.get(session_id)
        if timeout_ms is None:
            return False
        bucket = self._bucket(now_ms + timeout_ms)
        old = self._bucket_of.get(session_id)
        if old == bucket:
            return True
        if old is not None:
            members = self._buckets[old]
            members.discard(session_id)
            if not members:
                del self._buckets[old]
        self._bucket_of[session_id] = bucket
        self._buckets.setdefault(bucket, set()).add(session_id)
        return True

    def remove(self, session_id: int) -> None:
        self.timeouts.pop(session_id, None)
        bucket = self._bucket_of.pop(session_id, None)
        if bucket is not None:
            members = self._buckets.get(bucket)
            if members is not None:
                members.discard(session_id)
                if not members:
                    del self._buckets[bucket]

    def expired(self, now_ms: int, limit: int | None = None) -> list[int]:
        """Sessions whose bucket is in the past, oldest bucket first (at most ``limit``); they
        stay tracked until ``remove``."""
        out: list[int] = []
        for bucket in sorted(b for b in self._buckets if b <= now_ms):
            out.extend(sorted(self._buckets[bucket]))
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def expiry_buckets(self) -> dict[int, list[int]]:
        return {bucket: sorted(members) for bucket, members in sorted(self._buckets.items())}

    def __contains__(self, session_id: int) -> bool:
        return session_id in self.timeouts

    def __len__(self) -> int:
        return len(self.timeouts)
