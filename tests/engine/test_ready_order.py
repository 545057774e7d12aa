"""The order in which the engine carries out each kind of Ready (``zabby.core.ready``'s
contract), written down step by step: the effects it asks of its driver, the txns it
applies, the sessions it touches, the syncs it answers, its role changes and each
``advance``, as one transcript per kind of Ready.

- a broadcast Ready, the log synced inline: early messages, the commits an earlier Ready
  logged durably, the append, the Ready's requests and touches, then its messages, its
  sync answers and ``advance``;
- broadcast Readys, the log synced in the background: what follows the fsync waits for
  ``log_synced``, and the Readys one sync covers finish together (one apply, one Send);
- a Ready that changes more than the log: the Readys waiting for the sync first, then the
  contract's steps at once (an epoch written before the commits are applied);
- a Ready that asks for no effect: acted on, answered and advanced at once, or behind the
  Readys still waiting for the sync when it answers a sync.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.helpers import create, make_engine
from zabby.core.messages import Ack, Message, Ping, Sync
from zabby.core.ready import Ready, SoftState
from zabby.core.types import ServerState, ZabPhase
from zabby.engine import Append, DropLinks, Engine, Persist, Send
from zabby.engine.effects import Effect
from zabby.tree.txns import Txn, zxid_counter, zxid_epoch

SESSION = 0x77
FOLLOWING = SoftState(ServerState.FOLLOWING, ZabPhase.BROADCAST, 2, 1, True)


def zxid_text(zxid: int) -> str:
    return f"{zxid_epoch(zxid)}/{zxid_counter(zxid)}"


def txns_text(txns: list[Txn]) -> str:
    return " ".join(zxid_text(txn.zxid) for txn in txns)


def message_text(sid: int, message: Message) -> str:
    zxid = getattr(message, "zxid", None)
    return f"{sid}:{type(message).__name__}" + (f"({zxid_text(zxid)})" if zxid is not None else "")


def effect_text(effect: Effect) -> str:
    if isinstance(effect, Send):
        return "send " + ", ".join(message_text(sid, message) for sid, message in effect.messages)
    if isinstance(effect, Append):
        return f"append {txns_text(effect.txns)}" + (" (fsync)" if effect.sync else "")
    if isinstance(effect, Persist):
        parts = [f"epoch {effect.current_epoch}"] if effect.current_epoch is not None else []
        parts += [f"append {txns_text(effect.append)}"] if effect.append else []
        return "persist " + " ".join(parts + ["(fsync)"] if effect.sync else parts)
    if isinstance(effect, DropLinks):
        return "drop links " + ",".join(map(str, effect.sids))
    return type(effect).__name__


class Transcript:
    """An engine (server 1 of 3, following server 2) fed hand-made Readys in place of its
    core's; ``ready`` and ``synced`` return the steps each input led to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, syncs_inline: bool) -> None:
        self.engine: Engine = make_engine([create(1)])
        self.syncs_inline = syncs_inline
        self.steps: list[str] = []
        self.labels: dict[int, str] = {}
        self.pending: list[Ready] = []
        self.soft = self.engine.soft
        engine, peer = self.engine, self.engine.peer
        monkeypatch.setattr(peer, "has_ready", lambda: bool(self.pending))
        monkeypatch.setattr(peer, "ready", lambda: self.pending.pop(0))
        monkeypatch.setattr(peer, "advance", lambda ready: self.note(f"advance {self.labels[id(ready)]}"))
        monkeypatch.setattr(engine.sessions, "touch", lambda session_id, now_ms: self.note(f"touch 0x{session_id:x}") or True)
        engine.on_applied = lambda txn, result: self.note(f"apply {zxid_text(txn.zxid)}")

    def note(self, step: str) -> None:
        if self.engine.soft != self.soft:  # a role change shows where it happened
            self.soft = self.engine.soft
            self.steps.append(f"state {self.soft.state.value}")
        self.steps.append(step)

    def answers_sync(self, cxid: int) -> Sync:
        self.engine.sync_waiting.put((SESSION, cxid), lambda: self.note(f"answer sync {cxid}"))
        return Sync(SESSION, cxid)

    def ready(self, label: str, **fields: Any) -> list[str]:
        ready = Ready(soft_state=fields.pop("soft_state", self.engine.soft), **fields)
        self.labels[id(ready)] = label
        self.pending.append(ready)
        return self.run()

    def synced(self, txn: Txn) -> list[str]:
        self.engine.log_synced(txn.zxid)
        return self.run()

    def run(self) -> list[str]:
        engine, result = self.engine, None
        self.steps = []
        engine.begin_turn()
        for _ in range(100):
            effect = engine.next_effect(result)
            if effect is None:
                if not engine.has_work():
                    return self.steps
                engine.begin_turn()
                continue
            self.note(effect_text(effect))
            result = (False, self.syncs_inline or not effect.sync) if isinstance(effect, Append) else False if isinstance(effect, Persist) else None
        raise AssertionError("the engine did not settle")


@pytest.fixture
def inline(monkeypatch: pytest.MonkeyPatch) -> Transcript:
    return Transcript(monkeypatch, syncs_inline=True)


@pytest.fixture
def background(monkeypatch: pytest.MonkeyPatch) -> Transcript:
    return Transcript(monkeypatch, syncs_inline=False)


def test_a_broadcast_ready_with_the_log_synced_inline(inline: Transcript) -> None:
    t2, t3 = create(2), create(3)
    assert inline.ready("R1", append=[t2], must_sync=True, messages=[(2, Ack(t2.zxid))]) == [
        "append 1/2 (fsync)", "send 2:Ack(1/2)", "advance R1",
    ]  # fmt: skip
    # R1 logged 1/2 durably: R2 applies it first (answered without waiting for 1/3's fsync);
    # its ACK and its sync answer leave only after 1/3 is durable.
    sync = inline.answers_sync(5)
    assert inline.ready("R2", early_messages=[(2, Ping())], committed=[t2], append=[t3], must_sync=True, messages=[(2, Ack(t3.zxid))],
                        touched_sessions=[SESSION], sync_replies=[sync]) == [
        "send 2:Ping", "apply 1/2", "append 1/3 (fsync)", "touch 0x77", "send 2:Ack(1/3)", "answer sync 5", "advance R2",
    ]  # fmt: skip
    # A quorum of one logs and commits the same txns in one Ready: applied after its log.
    t4 = create(4)
    assert inline.ready("R3", append=[t4], must_sync=True, committed=[t4]) == ["append 1/4 (fsync)", "apply 1/4", "advance R3"]


def test_broadcast_readys_with_the_log_synced_in_the_background(background: Transcript) -> None:
    t2, t3 = create(2), create(3)
    first = background.answers_sync(1)
    assert background.ready("R1", append=[t2], must_sync=True, messages=[(2, Ack(t2.zxid))], sync_replies=[first]) == ["append 1/2 (fsync)"]
    # 1/2 is not durable yet: R2 cannot apply it first; its touch is acted on at once.
    assert background.ready("R2", committed=[t2], append=[t3], must_sync=True, messages=[(2, Ack(t3.zxid))], touched_sessions=[SESSION]) == [
        "append 1/3 (fsync)", "touch 0x77",
    ]  # fmt: skip
    # A Ready that asks for no effect and holds nothing that waits is done at once; one that
    # answers a sync waits behind the commits before it.
    assert background.ready("R3", touched_sessions=[SESSION]) == ["touch 0x77", "advance R3"]
    fourth = background.answers_sync(4)
    assert background.ready("R4", sync_replies=[fourth]) == []
    # One sync covers all three: one apply, one Send (R1's ACK is covered by R2's), then each
    # Ready's sync answers and advance, in order.
    assert background.synced(t3) == ["apply 1/2", "send 2:Ack(1/3)", "answer sync 1", "answer sync 4", "advance R1", "advance R2", "advance R4"]


def test_a_background_sync_finishes_only_the_readys_it_covers(background: Transcript) -> None:
    t2, t3 = create(2), create(3)
    background.ready("R1", append=[t2], must_sync=True, messages=[(2, Ack(t2.zxid))])
    background.ready("R2", committed=[t2], append=[t3], must_sync=True, messages=[(2, Ack(t3.zxid))])
    assert background.synced(t2) == ["send 2:Ack(1/2)", "advance R1"]
    assert background.synced(t3) == ["apply 1/2", "send 2:Ack(1/3)", "advance R2"]


def test_a_ready_that_changes_more_than_the_log_first_finishes_the_readys_waiting_for_the_sync(background: Transcript) -> None:
    t2, t3 = create(2), create(3)
    background.ready("R1", append=[t2], must_sync=True, messages=[(2, Ack(t2.zxid))])
    sync = background.answers_sync(7)
    assert background.ready("R2", soft_state=FOLLOWING, early_messages=[(2, Ping())], committed=[t2], append=[t3], must_sync=True,
                            messages=[(2, Ack(t3.zxid))], drop_links=[3], touched_sessions=[SESSION], sync_replies=[sync]) == [
        "persist (fsync)", "send 2:Ack(1/2)", "advance R1",  # the log made durable here, and R1 finished
        "send 2:Ping", "apply 1/2", "persist append 1/3 (fsync)", "touch 0x77", "send 2:Ack(1/3)", "drop links 3",
        "answer sync 7", "state following", "advance R2",
    ]  # fmt: skip


def test_a_ready_that_writes_an_epoch_applies_its_commits_after_it(inline: Transcript) -> None:
    t2, t3 = create(2), create(3)
    inline.ready("R1", append=[t2], must_sync=True)
    assert inline.ready("R2", soft_state=FOLLOWING, current_epoch=2, committed=[t2], append=[t3], must_sync=True, messages=[(2, Ack(t3.zxid))]) == [
        "persist epoch 2 append 1/3 (fsync)", "apply 1/2", "send 2:Ack(1/3)", "state following", "advance R2",
    ]  # fmt: skip


def test_a_ready_that_asks_for_no_effect_is_acted_on_answered_and_advanced_at_once(inline: Transcript) -> None:
    sync = inline.answers_sync(3)
    assert inline.ready("R1", touched_sessions=[SESSION], sync_replies=[sync]) == ["touch 0x77", "answer sync 3", "advance R1"]
