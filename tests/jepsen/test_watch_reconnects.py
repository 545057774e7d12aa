"""The reconnect soak of the watch feed: a watching client cut again and again under a write
load must hear every change once, in zxid order (``harness.jepsen.reconnects``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jepsen.reconnects import SoakSpec, soak


def _assert_clean(result: dict, reconnects: int) -> None:  # type: ignore[type-arg]
    assert result["ok"], result["failures"]
    # a round may find the watcher already gone (reconnecting on its own): it reconnects all the same
    assert result["cuts"] >= reconnects * 0.99 and result["watcher_reconnects"] >= reconnects, result
    assert result["events"] == result["expected"] > 0, result
    assert (result["missed"], result["duplicated"], result["reordered"], result["mismatched"], result["history_lost"]) == (0, 0, 0, 0, 0)


@pytest.mark.timeout(90)
def test_two_hundred_reconnects_miss_and_repeat_nothing(tmp_path: Path) -> None:
    _assert_clean(soak(SoakSpec(reconnects=200, workdir=tmp_path, seed=5)), 200)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_ten_thousand_reconnects_miss_and_repeat_nothing(tmp_path: Path) -> None:
    _assert_clean(soak(SoakSpec(reconnects=10_000, workdir=tmp_path, seed=6)), 10_000)


def test_a_soak_of_no_reconnects_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reconnects must be 1 or more"):
        soak(SoakSpec(reconnects=0, workdir=tmp_path))
