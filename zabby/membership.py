"""An ensemble's membership: who votes, who observes, where each server is, and its version.

The text form is ZooKeeper's dynamic configuration (``zoo.cfg.dynamic.<version>``, and the
data of ``/zookeeper/config``)::

    server.<sid>=<host>:<quorumPort>:<electionPort>[:participant|:observer][;[<clientHost>:]<clientPort>]
    ...
    version=<hex zxid of the reconfig that made it; 0 for a static configuration>

Pure data: parsing, printing and the changes a ``reconfig`` asks for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace


class MembershipError(ValueError):
    """A server spec or a reconfig request that does not make a valid membership."""


@dataclass(frozen=True, slots=True)
class Member:
    sid: int
    host: str
    quorum_port: int
    election_port: int
    observer: bool = False
    client_port: int | None = None
    client_host: str | None = None  # None: every address (0.0.0.0)

    def spec(self) -> str:
        """``host:quorumPort:electionPort:role[;clientHost:clientPort]``"""
        text = f"{self.host}:{self.quorum_port}:{self.election_port}:{'observer' if self.observer else 'participant'}"
        if self.client_port is not None:
            text += f";{self.client_host or '0.0.0.0'}:{self.client_port}"
        return text


def parse_member(key: str, value: str) -> Member:
    """One ``server.N=...`` line.

    Raises:
        MembershipError: it is not of that form.
    """
    try:
        sid = int(key.strip().split(".", 1)[1])
        address, _, client = value.strip().partition(";")
        parts = address.split(":")
        host, quorum_port, election_port = parts[0], int(parts[1]), int(parts[2])
        role = parts[3] if len(parts) > 3 and parts[3] else "participant"
    except (IndexError, ValueError):
        raise MembershipError(f"{key}={value!r}: expected host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]") from None
    if role not in ("participant", "observer"):
        raise MembershipError(f"{key}: unknown role {role!r}")
    client_host, client_port = _client_address(key, client)
    return Member(sid, host, quorum_port, election_port, role == "observer", client_port, client_host)


def _client_address(key: str, text: str) -> tuple[str | None, int | None]:
    if not text.strip():
        return None, None
    host, _, port = text.strip().rpartition(":")
    try:
        return (host or None), int(port)
    except ValueError:
        raise MembershipError(f"{key}: bad client address {text!r}") from None


@dataclass(frozen=True, slots=True)
class Membership:
    members: tuple[Member, ...]  # sorted by sid
    version: int = 0
    # the sets every message and every quorum count looks at, made once (a frozen membership),
    # and read as fields: a property is a Python call on every forwarded write
    sids: frozenset[int] = field(init=False, repr=False, compare=False)
    voters: frozenset[int] = field(init=False, repr=False, compare=False)
    observers: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sids", frozenset(m.sid for m in self.members))
        object.__setattr__(self, "voters", frozenset(m.sid for m in self.members if not m.observer))
        object.__setattr__(self, "observers", frozenset(m.sid for m in self.members if m.observer))

    @classmethod
    def of(cls, members: Iterable[Member], version: int = 0) -> Membership:
        ordered = tuple(sorted(members, key=lambda m: m.sid))
        if len({m.sid for m in ordered}) != len(ordered):
            raise MembershipError("a server id appears twice")
        if not any(not m.observer for m in ordered):
            raise MembershipError("a membership needs at least one participant")
        return cls(ordered, version)

    def member(self, sid: int) -> Member | None:
        return next((m for m in self.members if m.sid == sid), None)

    def text(self) -> str:
        lines = [f"server.{m.sid}={m.spec()}" for m in self.members]
        # No newline at the end, as ZooKeeper's QuorumVerifier.toString(): clients read the
        # version from the last line (kazoo's own reconfig test does).
        return "\n".join([*lines, f"version={self.version:x}"])

    @classmethod
    def parse(cls, text: str) -> Membership:
        """The dynamic configuration's text (``version=`` optional: 0).

        Raises:
            MembershipError: a line is malformed, or the result is not a valid membership.
        """
        members, version = [], 0
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise MembershipError(f"expected key=value, got {line!r}")
            if key.strip() == "version":
                try:
                    version = int(value.strip(), 16)
                except ValueError:
                    raise MembershipError(f"version={value!r} is not hexadecimal") from None
            elif key.strip().startswith("server."):
                members.append(parse_member(key, value))
        return cls.of(members, version)

    # ----------------------------------------------------------------- reconfig
    def changed(self, joining: Iterable[str], leaving: Iterable[int], version: int) -> Membership:
        """An incremental reconfig: ``joining`` are ``server.N=spec`` lines (a known N is
        replaced: a role or address change), ``leaving`` are server ids.

        A leaving id that is no member is ignored, as ZooKeeper ignores it (the reconfig still
        commits, with a new version).

        Raises:
            MembershipError: a spec is malformed, or nobody votes.
        """
        members = {m.sid: m for m in self.members}
        for sid in leaving:
            members.pop(sid, None)
        for line in joining:
            member = parse_member(*_key_value(line))
            members[member.sid] = member
        return Membership.of(members.values(), version)

    def replaced(self, new_members: Iterable[str], version: int) -> Membership:
        """A non-incremental reconfig: exactly these ``server.N=spec`` lines."""
        return Membership.of((parse_member(*_key_value(line)) for line in new_members), version)

    def with_version(self, version: int) -> Membership:
        return replace(self, version=version)


def _key_value(line: str) -> tuple[str, str]:
    key, sep, value = line.strip().partition("=")
    if not sep or not key.strip().startswith("server."):
        raise MembershipError(f"expected server.N=host:quorumPort:electionPort..., got {line!r}")
    return key, value
