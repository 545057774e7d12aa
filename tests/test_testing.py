"""``zabby.testing``'s own rules, without servers: parallel test workers never hand out the same
port, and an ensemble of no server is refused."""

from __future__ import annotations

import pytest

import zabby.testing
from zabby.testing.processes import PORT_LOW, free_port, xdist_worker


@pytest.mark.parametrize("index", [0, 1, 2])
def test_each_xdist_worker_draws_ports_of_its_own(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    assert xdist_worker() == (index, 3)
    assert {(free_port() - PORT_LOW) % 3 for _ in range(20)} == {index}


@pytest.mark.parametrize(("name", "count"), [("", ""), ("gw3", "3"), ("master", "2"), ("gw0", "x")])
def test_outside_a_worker_every_port_may_be_drawn(monkeypatch: pytest.MonkeyPatch, name: str, count: str) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert xdist_worker() == (0, 1)


def test_an_ensemble_of_no_server_is_refused() -> None:
    with pytest.raises(ValueError, match="one server or more"):
        zabby.testing.ensemble(0)
