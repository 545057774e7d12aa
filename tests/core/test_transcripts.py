"""The core's protocol transcripts (tests/core/testdata/*.txt, run by tests/core/transcript.py):
election, each sync mode (a SNAP installed by the shell among them), broadcast, an observer's
INFORMs, a two-voter LOGGED, pings with touched sessions, link loss and syncLimit, a server
repairing its storage that abstains until its sync, a reconfig that turns a follower into an
observer, and the
zxid counter's end, as the messages and Readys
they are.  ``ZABBY_REWRITE_TRANSCRIPTS=1 pytest tests/core/test_transcripts.py`` rewrites
them with what the core does now; the diff is what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.transcript import check_file

FILES = sorted((Path(__file__).parent / "testdata").glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_transcript(path: Path) -> None:
    differences = check_file(path)
    assert not differences, "\n\n".join(differences)


def test_there_are_transcripts() -> None:
    assert len(FILES) >= 5
