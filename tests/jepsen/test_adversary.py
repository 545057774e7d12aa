"""The generative adversary's short run (issue 56): a few attacks hypothesis draws from every
kind the harness knows, small, against a real server restarted after each; what the resource
model promises holds after every one (docs/resource-model.md).  ``scripts/adversary.py`` runs
the long one."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from harness.jepsen import adversary
from harness.jepsen.adversary import Arena, Attack, attacks


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    servers = Arena(Path(tmp_path_factory.mktemp("adversary")))
    servers.start()
    yield servers
    servers.stop()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True)
@given(attack=attacks(scale=0.05))
def test_whatever_the_adversary_sends_the_server_lives_keeps_its_budget_and_its_bystanders_and_restarts(arena: Arena, attack: Attack) -> None:
    verdict = arena.attack(attack)
    assert not verdict.problems, verdict.line()


def test_a_server_that_answers_nothing_before_an_attack_is_a_finding_and_the_run_goes_on(
        arena: Arena, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(adversary, "BYSTANDER_READY_S", 2.0)
    server = arena.target
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)  # alive, and answering nothing
    verdict = arena.attack(Attack("bad-ops", {"connections": 1}))
    assert any(problem.startswith("before the attack:") for problem in verdict.problems), verdict.line()
    assert arena.attack(Attack("bad-ops", {"connections": 1})).problems == []  # restarted: the next one runs
