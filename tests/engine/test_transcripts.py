"""The engine's transcripts (tests/engine/testdata/*.txt, run by tests/engine/transcript.py): the
effects a driver is handed, in order, and where the clients' answers come among them.
``ZABBY_REWRITE_TRANSCRIPTS=1 pytest tests/engine/test_transcripts.py`` rewrites them with what
the engine does now; the diff is what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.transcript import check_file
from tests.engine.transcript import EngineTranscript

FILES = sorted((Path(__file__).parent / "testdata").glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_transcript(path: Path) -> None:
    differences = check_file(path, EngineTranscript())
    assert not differences, "\n\n".join(differences)


def test_there_are_transcripts() -> None:
    assert len(FILES) >= 2
