"""What one source, or many, may hold of what the others need (issue 56): the peer ports'
slots for links that have not said who they are, and the admin port's connections."""

from __future__ import annotations

import trio

from zabby.config import PeerLinkLimits
from zabby.server.peering.peer_slots import Slot, UnidentifiedSlots
from zabby.server.process.sources import SessionSources, SourceCounts, source_of


def test_a_source_is_an_ipv4_address_or_an_ipv6_64() -> None:
    assert source_of("10.0.0.7") == "10.0.0.7"
    assert source_of("::ffff:10.0.0.7") == "10.0.0.7"
    assert source_of("2001:db8:1:2:aaaa::1") == source_of("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert source_of("2001:db8:1:3::1") != source_of("2001:db8:1:2::1")
    assert source_of(None) == ""


def test_counts_hold_per_source_and_in_all_and_forget_what_is_given_back() -> None:
    counts = SourceCounts(total_max=5, per_source_max=2)
    assert counts.take("a") is None and counts.take("a") is None
    assert counts.take("a") == "2 are held from a"
    assert all(counts.take(s) is None for s in ("b", "b", "c"))
    assert counts.take("d") == "5 are held"
    for source in ("a", "a", "b", "b", "c"):
        counts.give_back(source)
    assert counts.total == 0 and counts.sources() == 0


def test_outsiders_never_take_a_members_slots() -> None:
    """However many addresses outsiders have, a member's host keeps its own slots; a process on
    a member's host takes only that host's."""
    limits = PeerLinkLimits(unidentified_max=6, unidentified_per_host_max=2, member_host_max=3)

    async def main() -> None:
        slots = UnidentifiedSlots(limits, lambda: ["10.0.0.1", "10.0.0.2", "localhost"])
        outsiders = [await slots.take(f"192.0.2.{i}") for i in range(1, 5) for _ in range(3)]
        taken = [slot for slot in outsiders if isinstance(slot, Slot)]
        assert len(taken) == 6  # 2 from each of 3 sources: the shared slots are full
        assert [s for s in outsiders if not isinstance(s, Slot)][0] == "2 are held from 192.0.2.1 (not from a member host)"
        members = [await slots.take(address) for address in ("10.0.0.1",) * 4 + ("::ffff:10.0.0.2", "127.0.0.1")]
        assert [isinstance(slot, Slot) for slot in members] == [True, True, True, False, True, True]
        for slot in taken:
            slot.release()
        assert slots.shared.total == 0

    trio.run(main)


def test_sessions_per_source_are_admitted_up_to_the_bound_while_they_live() -> None:
    alive: set[int] = set()
    sources = SessionSources(per_source_max=3, alive=alive.__contains__, entries_max=10)
    for session_id in (1, 2, 3):
        assert sources.admit("a")
        sources.created("a", session_id)
        alive.add(session_id)
    assert not sources.admit("a") and sources.admit("b")  # another source is not held back
    alive.discard(2)  # closed or expired: the next admit finds it gone
    assert sources.admit("a") and sources.held("a") == 2


def test_session_sources_hold_at_most_twice_their_entries_however_many_sources_come_and_go() -> None:
    alive: set[int] = set()
    sources = SessionSources(per_source_max=5, alive=alive.__contains__, entries_max=100)
    for session_id in range(10_000):  # each source's sessions expire before it comes back
        sources.created(f"10.0.{session_id // 250}.{session_id % 250}", session_id)
        assert sources._entries <= 2 * 100 + 1
    assert sum(sources.held(f"10.0.{n // 250}.{n % 250}") for n in range(10_000)) == sources._entries
