"""A user's program that imports zabby type-checks against zabby's own annotations (py.typed):
no ``import-untyped``, and a wrong use of a result is caught, so the types are not ``Any``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zabby

USER_PROGRAM = '''
import asyncio

import zabby
from zabby import AddWatchMode, AsyncResult, Client, NoNodeError, SyncClient, WatchedEvent, ZnodeStat


async def serve(client: Client) -> bytes:
    data, stat = await client.get("/config")
    path: str = await client.create("/items/item-", b"", sequence=True)
    created, created_stat = await client.create("/x", b"", include_data=True)
    children: list[str] = await client.get_children("/items")
    async with client.watch("/config", mode=AddWatchMode.PERSISTENT_RECURSIVE) as events:
        async for event in events:
            assert isinstance(event, WatchedEvent) and event.zxid >= 0
            break
    version: int = stat.version + created_stat.version
    return data + path.encode() + created.encode() + bytes(len(children) + version)


def blocking(client: SyncClient) -> ZnodeStat | None:
    future: AsyncResult[tuple[bytes, ZnodeStat]] = client.get_async("/config")
    data, stat = future.get(timeout=5)
    try:
        client.delete("/gone")
    except NoNodeError:
        pass
    return client.exists("/config")


async def awaited(client: SyncClient) -> bytes:
    data, _ = await client.get_async("/config")
    return data


asyncio.run(serve(Client("127.0.0.1:2181")))
'''

WRONG_USE = '''
from zabby import Client


async def wrong(client: Client) -> int:
    data, stat = await client.get("/config")
    return data  # bytes, not int
'''


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``source`` with zabby found as an installed package (a site directory
    holding it, so its py.typed decides), as it is for a user."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    link = site / "zabby"
    if not link.exists():
        link.symlink_to(Path(zabby.__file__).parent, target_is_directory=True)
    program = tmp_path / "user" / "app.py"
    program.parent.mkdir(exist_ok=True)
    program.write_text(source)
    command = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(program)]
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    return subprocess.run(command, cwd=program.parent, env=env, capture_output=True, text=True, timeout=600)


def test_a_user_program_type_checks_against_zabby(tmp_path: Path) -> None:
    result = _mypy(tmp_path, USER_PROGRAM)
    assert "import-untyped" not in result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    wrong = _mypy(tmp_path, WRONG_USE)
    assert wrong.returncode == 1 and 'Incompatible return value type (got "bytes", expected "int")' in wrong.stdout, wrong.stdout
