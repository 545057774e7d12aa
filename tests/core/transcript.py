"""Transcript tests for the core (etcd-raft's datadriven ``testdata/*.txt``): each file is a
protocol transcript, commands in and the Readys they produce out.

A file is a sequence of cases, each a command line, ``----``, and the expected output,
separated by blank lines; ``#`` lines are comments.  Commands drive one ``Peer``:

    peer sid=2 voters=1,2,3 [observers=4] [accepted=1] [current=1] [logged=1/3] [counter_last=6] [repairing=1]
    step 1 LeaderInfo(epoch=2)          # a message from server 1 (any message class; z(e, c),
                                        # txn(e, c), txns(e, first, last) and
                                        # reconfig(e, c, "1,3,4", observers="2") are at hand)
    tick [count]
    propose 2/1 2/2                     # the leader proposes txns of these zxids
    link_down 3
    touch 0x10 0x11                     # a learner's clients touched these sessions
    snapshot_installed 2/0              # the shell installed the leader's SNAP at this zxid

After each command every Ready the peer has is rendered and advanced: the soft state when it
changed, then the Ready's effects in the order the shell carries them out.  Zxids read
``epoch/counter``.  ``ZABBY_REWRITE_TRANSCRIPTS=1`` rewrites the files with what the core
does now (then read the diff: it is the review).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Protocol

from zabby.core import messages
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.ready import Ready, SoftState
from zabby.membership import Membership
from zabby.opcodes import OpCode
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn, make_zxid, zxid_counter, zxid_epoch

REWRITE = os.environ.get("ZABBY_REWRITE_TRANSCRIPTS") == "1"
SEPARATOR = "----"


def z(epoch: int, counter: int) -> int:
    return make_zxid(epoch, counter)


def txn(epoch: int, counter: int) -> Txn:
    return Txn(z(epoch, counter), 0, counter, 0, 1, ())


def reconfig(epoch: int, counter: int, voters: str, observers: str = "") -> Txn:
    """A RECONFIG txn at ``epoch/counter`` whose membership (its version the txn's zxid) has
    these voters and observers (comma-separated ids)."""
    lines = [f"server.{sid}=127.0.0.1:{2000 + int(sid)}:{3000 + int(sid)}:participant" for sid in voters.split(",")]
    lines += [f"server.{sid}=127.0.0.1:{2000 + int(sid)}:{3000 + int(sid)}:observer" for sid in observers.split(",") if sid]
    text = "\n".join([*lines, f"version={z(epoch, counter):x}"])
    return Txn(z(epoch, counter), 0, counter, 0, int(OpCode.RECONFIG), (text,))


def txns(epoch: int, first: int, last: int) -> tuple[Txn, ...]:
    return tuple(txn(epoch, counter) for counter in range(first, last + 1))


def zxid_text(zxid: int) -> str:
    return f"{zxid_epoch(zxid)}/{zxid_counter(zxid)}"


def parse_zxid(text: str) -> int:
    epoch, _, counter = text.partition("/")
    return z(int(epoch), int(counter))


# ------------------------------------------------------------------ rendering
def render_value(name: str, value: Any) -> str:
    if isinstance(value, Txn):
        return zxid_text(value.zxid)
    if isinstance(value, tuple) and value and all(isinstance(item, Txn) for item in value):
        return "[" + " ".join(zxid_text(item.zxid) for item in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool) and ("zxid" in name or name in ("logged", "config_version")) and value >= 0:
        return zxid_text(value)
    if isinstance(value, str) and "version=" in value:  # a membership's text: its servers and version
        membership = Membership.parse(value)
        observers = f" observers {','.join(map(str, sorted(membership.observers)))}" if membership.observers else ""
        return f"<voters {','.join(map(str, sorted(membership.voters)))}{observers} version {zxid_text(membership.version)}>"
    return repr(value)


def render_message(message: Any) -> str:
    shown = []
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        if field.default is not dataclasses.MISSING and value == field.default:
            continue
        shown.append(f"{field.name}={render_value(field.name, value)}")
    return f"{type(message).__name__}({', '.join(shown)})"


def render_soft(soft: SoftState) -> str:
    leader = "-" if soft.leader is None else soft.leader
    serving = " serving" if soft.serving else ""
    return f"{soft.state.value}/{soft.phase.value} leader={leader} epoch={soft.epoch}{serving}"


def render_ready(ready: Ready) -> list[str]:
    lines = [f"early -> {sid}: {render_message(m)}" for sid, m in ready.early_messages]
    if ready.accepted_epoch is not None:
        lines.append(f"accepted_epoch {ready.accepted_epoch}")
    if ready.truncate_to is not None:
        lines.append(f"truncate_to {zxid_text(ready.truncate_to)}")
    if ready.append:
        lines.append("append " + " ".join(zxid_text(t.zxid) for t in ready.append) + (" (fsync)" if ready.must_sync else ""))
    elif ready.must_sync:
        lines.append("fsync")
    if ready.current_epoch is not None:
        lines.append(f"current_epoch {ready.current_epoch}")
    if ready.committed:
        lines.append("apply " + " ".join(zxid_text(t.zxid) for t in ready.committed))
    lines += [f"-> {sid}: {render_message(m)}" for sid, m in ready.messages]
    lines += [f"drop link {sid}" for sid in ready.drop_links]
    lines += [f"request from {sid}: {render_message(r)}" for sid, r in ready.requests]
    lines += [f"sync reply: {render_message(s)}" for s in ready.sync_replies]
    if ready.touched_sessions:
        lines.append("touched " + " ".join(f"0x{s:x}" for s in ready.touched_sessions))
    return lines


def sent_message(text: str, **helpers: Any) -> tuple[int, Any]:
    """``"<sender> <message expression>"``: the sender's id and the message, the expression
    read with the core's message classes, ``z``, ``txn``, ``txns``, ``reconfig`` and
    ``helpers`` at hand."""
    sender, _, expression = text.partition(" ")
    namespace: dict[str, Any] = {name: getattr(messages, name) for name in dir(messages) if name[:1].isupper()}
    namespace.update(z=z, txn=txn, txns=txns, reconfig=reconfig, **helpers)
    return int(sender), eval(expression, namespace)  # noqa: S307 -- the test's own text


# ------------------------------------------------------------------ running
class Transcript:
    def __init__(self) -> None:
        self.peer: Peer | None = None
        self.soft: SoftState | None = None

    def run(self, command: str) -> str:
        verb, _, rest = command.partition(" ")
        handler = getattr(self, f"_cmd_{verb}", None)
        if handler is None:
            raise ValueError(f"unknown command {verb!r}")
        handler(rest.strip())
        return "\n".join(self._drain()) or "ok"

    def _drain(self) -> list[str]:
        peer = self.peer
        assert peer is not None, "no peer yet"
        lines = []
        while peer.has_ready():
            ready = peer.ready()
            if ready.soft_state != self.soft:
                lines.append(f"soft: {render_soft(ready.soft_state)}")
                self.soft = ready.soft_state
            lines += [f"  {line}" for line in render_ready(ready)]
            peer.advance(ready)
        return lines

    def _cmd_peer(self, rest: str) -> None:
        args = dict(item.split("=", 1) for item in rest.split())
        sids = [int(s) for s in args.pop("voters").split(",")]
        observers = [int(s) for s in args.pop("observers", "").split(",") if s]
        logged = parse_zxid(args.pop("logged", "0/0"))
        accepted = int(args.pop("accepted", zxid_epoch(logged)))
        config = PeerConfig(sid=int(args.pop("sid")), voters=frozenset(sids), observers=frozenset(observers),
                            zxid_counter_last=int(args.pop("counter_last", ZXID_COUNTER_LAST)))  # fmt: skip
        history = tuple(txn(zxid_epoch(logged), c) for c in range(1, zxid_counter(logged) + 1))
        durable = DurableState(accepted_epoch=accepted, current_epoch=int(args.pop("current", accepted)),
                               last_logged=logged, applied=logged, history=history,
                               repairing=args.pop("repairing", "0") == "1")  # fmt: skip
        if args:
            raise ValueError(f"unknown peer arguments {sorted(args)}")
        self.peer = Peer(config, durable)
        self.soft = None

    def _cmd_step(self, rest: str) -> None:
        assert self.peer is not None
        sender, message = sent_message(rest)
        self.peer.step(sender, message)

    def _cmd_tick(self, rest: str) -> None:
        assert self.peer is not None
        for _ in range(int(rest or "1")):
            self.peer.tick()

    def _cmd_propose(self, rest: str) -> None:
        assert self.peer is not None
        self.peer.propose([txn(zxid_epoch(zxid), zxid_counter(zxid)) for zxid in map(parse_zxid, rest.split())])

    def _cmd_link_down(self, rest: str) -> None:
        assert self.peer is not None
        self.peer.link_down(int(rest))

    def _cmd_touch(self, rest: str) -> None:
        assert self.peer is not None
        self.peer.touch_sessions([int(s, 0) for s in rest.split()])

    def _cmd_snapshot_installed(self, rest: str) -> None:
        assert self.peer is not None
        self.peer.snapshot_installed(parse_zxid(rest))


def parse_cases(text: str) -> list[tuple[list[str], str, str]]:
    """(the lines before the command: comments and blanks, the command, its expected output)."""
    cases = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        lead = []
        while index < len(lines) and (not lines[index].strip() or lines[index].startswith("#")):
            lead.append(lines[index])
            index += 1
        if index >= len(lines):
            break
        command = lines[index]
        index += 1
        if index >= len(lines) or lines[index] != SEPARATOR:
            raise ValueError(f"{command!r}: expected {SEPARATOR!r} after the command")
        index += 1
        expected = []
        while index < len(lines) and lines[index].strip():
            expected.append(lines[index])
            index += 1
        cases.append((lead, command, "\n".join(expected)))
    return cases


class Runner(Protocol):
    def run(self, command: str) -> str: ...


def check_file(path: Path, transcript: Runner | None = None) -> list[str]:
    """Run a transcript through ``transcript`` (the core's by default); the differences
    (empty: as written).  With REWRITE, rewrite it."""
    transcript = transcript or Transcript()
    differences, out = [], []
    for lead, command, expected in parse_cases(path.read_text()):
        got = transcript.run(command)
        if got != expected:
            differences.append(f"{path.name}: {command}\n--- expected\n{expected}\n--- got\n{got}")
        out += [*lead, command, SEPARATOR, got]
    if REWRITE:
        path.write_text("\n".join(out) + "\n")
        return []
    return differences
