"""Transcript tests for the engine (``testdata/*.txt``, read and written as the core's are:
``tests/core/transcript.py``): commands in, and out the effects the engine hands its driver,
in the order it hands them, with the clients' answers where they are given.

Commands drive one ``Engine`` (``tests.engine.helpers.make_engine``: a fake clock, sessions of
its own) whose effects a driver carries out at once (``Driver.answer``):

    engine sid=1 servers=3 [txns=2] [key=value ...]   # a member with 2 creates logged and applied
    receive 2 Ack(zxid=z(1, 3))          # a message from server 2 (the core's message classes;
                                         # forwarded(1, 2, 1): the txn of the first createSession
                                         # this follower forwarded, at zxid 2/1)
    session 4000                         # a client opens a session (named s1, s2, ... in answers)
    create s1 /a                         # a client write: createSession's session, a path
    set s1 /a v2                         # a setData of any version
    create s1 /b ; create s1 /c          # commands taken in the same turn
    tick [count]                         # the engine's clock: a core tick each
    sync background                      # an Append's fsync is left running (``log_synced``)
    log_synced 1/3                       # the background fsync covered the log up to 1/3

After each command the engine runs until it has nothing more to do; each effect it asked for
is one line (a Send one line per message), each client's answer a line ``answer s1#1: ...``.
Zxids read ``epoch/counter``.  ``ZABBY_REWRITE_TRANSCRIPTS=1`` rewrites the files.
"""

from __future__ import annotations

from typing import Any

from tests.core.transcript import parse_zxid, render_message, render_soft, sent_message, z, zxid_text
from tests.engine.helpers import Driver, create, make_engine
from zabby.core import messages
from zabby.core.ready import SoftState
from zabby.engine import Append, Engine, Persist
from zabby.engine.effects import Effect, Install, Reconfigure, Reload, Send, StageSnapshot, WriteSnapshot
from zabby.opcodes import CreateMode, OpCode
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.prep import Caller
from zabby.tree.txns import Txn

def render_sent(message: messages.Message) -> str:
    if isinstance(message, messages.Request):  # its session's password and args say little here
        return f"Request(session_id=0x{message.session_id:x}, cxid={message.cxid}, op={OpCode(message.op).name})"
    return render_message(message)


def render_effect(effect: Effect) -> list[str]:
    if isinstance(effect, Send):
        return [f"send -> {sid}: {render_sent(message)}" for sid, message in effect.messages]
    if isinstance(effect, Append):
        return [f"append {' '.join(zxid_text(t.zxid) for t in effect.txns) or '-'}{' (fsync)' if effect.sync else ''}"]
    if isinstance(effect, Persist):
        parts = [f"accepted_epoch {effect.accepted_epoch}"] if effect.accepted_epoch is not None else []
        parts += [f"truncate_to {zxid_text(effect.truncate_to)}"] if effect.truncate_to is not None else []
        parts += [f"append {' '.join(zxid_text(t.zxid) for t in effect.append)}"] if effect.append else []
        parts += ["fsync"] if effect.sync else []
        parts += [f"current_epoch {effect.current_epoch}"] if effect.current_epoch is not None else []
        return [f"persist {', '.join(parts)}"]
    if isinstance(effect, (WriteSnapshot, Install)):
        return [f"{type(effect).__name__} {zxid_text(effect.zxid)}"]
    if isinstance(effect, StageSnapshot):
        return [f"StageSnapshot from {effect.sid} at {zxid_text(effect.zxid)}: {len(effect.records)} records{' (start)' if effect.start else ''}"]
    if isinstance(effect, Reconfigure):
        return [f"Reconfigure {effect.membership.text()}{' committed' if effect.committed else ''}"]
    if isinstance(effect, Reload):
        return [f"Reload ({effect.why})"]
    return [repr(effect)]


class EngineTranscript:
    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.driver: Driver | None = None
        self.lines: list[str] = []
        self.sessions: list[int] = []
        self.cxid = 0
        self.soft: SoftState | None = None
        self.forwarded: list[messages.Request] = []  # the requests sent to a leader, in order

    def run(self, command: str) -> str:
        """One line: a command, or several separated by `` ; `` that the engine takes in the
        same turn (two clients' writes, say)."""
        self.lines = []
        for one in command.split(" ; "):
            verb, _, rest = one.partition(" ")
            handler = getattr(self, f"_cmd_{verb}", None)
            if handler is None:
                raise ValueError(f"unknown command {verb!r}")
            handler(rest.strip())
        if self.engine is not None:
            self._settle()
        return "\n".join(self.lines) or "ok"

    def _settle(self) -> None:
        """Run the engine until it has nothing to do, as the server's loop does turn after turn."""
        assert self.driver is not None
        self.driver.run()
        self._note_soft()

    def _on_effect(self, effect: Effect) -> None:
        self._note_soft()
        self.lines += render_effect(effect)
        if isinstance(effect, Send):
            self.forwarded += [m for _, m in effect.messages if isinstance(m, messages.Request)]

    def _note_soft(self) -> None:
        assert self.engine is not None
        if self.engine.soft != self.soft:
            self.soft = self.engine.soft
            self.lines.append(f"soft: {render_soft(self.soft)}")

    def _answer(self, name: str) -> Any:
        def done(answer: Any, result: Any) -> None:
            if name.startswith("session"):
                self.sessions.append(answer.session_id)
                self.lines.append(f"answer {name}: s{len(self.sessions)} at {zxid_text(answer.zxid)}")
            else:
                self.lines.append(f"answer {name}: {OpCode(answer.type).name} at {zxid_text(answer.zxid)}")

        return done

    # ----------------------------------------------------------------- commands
    def _cmd_engine(self, rest: str) -> None:
        args = dict(item.split("=", 1) for item in rest.split())
        sid, servers, count = int(args.pop("sid", "1")), int(args.pop("servers", "1")), int(args.pop("txns", "0"))
        settings: dict[str, Any] = {key: int(value) if value.isdigit() else value for key, value in args.items()}
        self.engine = make_engine([create(counter) for counter in range(1, count + 1)], servers=servers, sid=sid, **settings)
        self.driver = Driver(self.engine)
        self.driver.on_effect = self._on_effect

    def _cmd_receive(self, rest: str) -> None:
        assert self.engine is not None
        self.engine.receive(*sent_message(rest, forwarded=self._forwarded_txn))

    def _forwarded_txn(self, number: int, epoch: int, counter: int) -> Txn:
        """The txn a leader makes of the ``number``-th request forwarded (from 1), at zxid
        ``epoch/counter``: a createSession's (a leader keeps its timeout and password)."""
        request = self.forwarded[number - 1]
        if request.op != OpCode.CREATE_SESSION:
            raise ValueError("forwarded(): only a createSession's txn is made here")
        return Txn(z(epoch, counter), request.session_id, request.cxid, 1_000_000, int(request.op), tuple(request.args))

    def _cmd_session(self, rest: str) -> None:
        assert self.engine is not None
        self.engine.create_session(int(rest), self._answer(f"session {rest}"))

    def _session(self, name: str) -> int:
        return self.sessions[int(name.removeprefix("s")) - 1]

    def _submit(self, session: str, op: OpCode, args: tuple[Any, ...]) -> None:
        assert self.engine is not None
        self.cxid += 1
        self.engine.submit(int(op), args, Caller(self._session(session), []), self.cxid, self._answer(f"{session}#{self.cxid}"))

    def _cmd_create(self, rest: str) -> None:
        session, path = rest.split()
        self._submit(session, OpCode.CREATE, (path, b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None))

    def _cmd_set(self, rest: str) -> None:
        session, path, value = rest.split()
        self._submit(session, OpCode.SET_DATA, (path, value.encode(), -1))

    def _cmd_tick(self, rest: str) -> None:
        assert self.engine is not None
        for _ in range(int(rest or "1")):
            self.engine.tick()

    def _cmd_sync(self, rest: str) -> None:
        assert self.driver is not None
        if rest not in ("inline", "background"):
            raise ValueError("sync inline|background")
        self.driver.syncs_at_once = rest == "inline"

    def _cmd_log_synced(self, rest: str) -> None:
        assert self.engine is not None
        self.engine.log_synced(parse_zxid(rest))

