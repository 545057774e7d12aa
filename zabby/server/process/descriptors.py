"""File descriptors: what the server keeps for itself, and what connections may take.

A process has RLIMIT_NOFILE descriptors.  Running out of them is not a disk failure, but it
was taken for one: the log's next segment could not be created (EMFILE) and the server
stopped.  So the server keeps a reserve that no connection a client or an HTTP caller opens
may use: ``descriptorReserve`` for its own files (the log and its next segment, snapshots and
their children's pipes, the data folders' listings, the listeners), plus what the peer links
can hold at most (``peer_link_descriptors``: their counts are bounded by the membership and by
``quorum.*Links*``).  Client connections (both client ports), admin connections and the
console's connections to other servers each take one descriptor from the rest
(``Descriptors``), and are refused at once when none is free.  Accepting a connection to
refuse it takes one descriptor for a moment per listener, which the reserve covers.
"""

from __future__ import annotations

import logging
import os
import resource

from zabby.config import ServerConfig
from zabby.server.peering.peer_slots import STRANGER_LINKS_MAX

LOGGER = logging.getLogger("zabby.server")
CONNECTIONS_LEAST = 16  # fewer left for connections than this: the limit is too low to serve


class DescriptorLimitError(Exception):
    """RLIMIT_NOFILE leaves too few descriptors for connections after the reserve."""


def peer_link_descriptors(config: ServerConfig) -> int:
    """The most descriptors the peer links can hold: two links (quorum, election) each way to
    every member and to the servers no membership names that may link, and the slots of links
    that have not said who they are (each member host's, and the others')."""
    if not config.peers:
        return 0
    limits = config.peer_links
    linked = len(config.peers) + STRANGER_LINKS_MAX
    member_hosts = len({peer.host for peer in config.peers})
    return 4 * linked + limits.unidentified_max + member_hosts * limits.member_host_max


def open_descriptors() -> int:
    """Descriptors this process has open now (0 where /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


class Descriptors:
    """The descriptors connections may hold at once: RLIMIT_NOFILE's soft limit, less those
    open at start, less the reserve.  ``take`` one per connection, ``give_back`` at its close."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self.refused = 0  # connections closed at once for want of one

    @classmethod
    def for_server(cls, config: ServerConfig) -> Descriptors:
        """The pool of this process, as its limit and its open descriptors are now.

        Raises:
            DescriptorLimitError: fewer than ``CONNECTIONS_LEAST`` would be left for
                connections (naming the limit and the reserve, and the way out).
        """
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            limit = 2**20
        reserve = config.descriptor_reserve + peer_link_descriptors(config)
        capacity = limit - open_descriptors() - reserve
        if capacity < CONNECTIONS_LEAST:
            raise DescriptorLimitError(f"the open files limit (RLIMIT_NOFILE) is {limit}: after the {reserve} descriptors kept for "
                                       f"the server's files and peer links (descriptorReserve={config.descriptor_reserve}), "
                                       f"{max(capacity, 0)} are left for connections; raise it (ulimit -n, LimitNOFILE=)")  # fmt: skip
        LOGGER.info("%d descriptors for client and admin connections (RLIMIT_NOFILE %d, %d kept for the server's files and peer links)",
                    capacity, limit, reserve)  # fmt: skip
        return cls(capacity)

    def take(self) -> bool:
        if self.held >= self.capacity:
            self.refused += 1
            return False
        self.held += 1
        return True

    def give_back(self) -> None:
        self.held -= 1
