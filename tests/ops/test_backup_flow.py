"""The disaster drill (``harness/local/backup_drill.py``): back up a live ensemble under write
load, delete every data dir, restore a new ensemble; the tree and digest are the backup's."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.local.backup_drill import run_drill


def _assert_restored(result, znodes: int) -> None:  # type: ignore[no-untyped-def]
    assert result.snapshot.znodes > znodes and result.writes_during_save > 0
    assert result.digests_equal and result.differences == []
    assert result.new_epoch > result.snapshot.zxid >> 32


@pytest.mark.timeout(600)
def test_backup_under_load_then_restore_a_new_ensemble(tmp_path: Path) -> None:
    _assert_restored(run_drill(tmp_path, 5_000, say=lambda _: None), 5_000)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_backup_of_100k_znodes_under_load_then_restore(tmp_path: Path) -> None:
    _assert_restored(run_drill(tmp_path, 100_000, say=lambda _: None), 100_000)
