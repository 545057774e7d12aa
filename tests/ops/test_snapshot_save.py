"""zabby-admin snapshot save: from a live server's admin endpoint, checked against the digest
the server announced; clear errors for a wrong server, missing credentials, a stream cut
short or a digest that does not match (and nothing left behind then)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local.admin import LOCAL_ADMIN, admin_settings
from tests.ops.helpers import admin
from tests.storage.helpers import TxnMaker, tree_of
from zabby import SyncClient
from zabby.ops.snapfile import status
from zabby.storage.snapshot import write_snapshot
from zabby.testing import ServerProcess, free_port

DIGEST = "admin:fvr2cB/fjGeAiX8g1aGhUm3ZICk="  # zabby-admin digest admin:secret


def test_save_needs_an_administrator(zabby_server: ServerProcess, tmp_path: Path) -> None:
    """The snapshot is the whole tree, every ACL's data: it streamed to anyone (issue 43)."""
    code, _, err = admin("snapshot", "save", str(tmp_path / "a.snap"), "--server", f"127.0.0.1:{zabby_server.admin_port}")
    assert code != 0 and "403" in err and "admin.console.auth" in err


def test_save_from_a_live_server(tmp_path: Path) -> None:
    zabby_server = ServerProcess(tmp_path / "server", **admin_settings())
    zabby_server.start()
    try:
        _save_from(zabby_server, tmp_path)
    finally:
        zabby_server.kill()


def _save_from(zabby_server: ServerProcess, tmp_path: Path) -> None:
    auth = ("--auth", ":".join(LOCAL_ADMIN))
    with SyncClient(zabby_server.hosts) as client:
        for index in range(300):
            client.create(f"/n{index}", b"v" * index)
    mntr = zabby_server.mntr()
    target = tmp_path / "backup.snap"
    code, out, err = admin("snapshot", "save", str(target), "--server", f"127.0.0.1:{zabby_server.admin_port}", *auth)
    assert code == 0, err
    info = status(target)
    assert f"0x{info.zxid:x}" == mntr["zk_last_zxid"] and f"0x{info.digest:016x}" == mntr["zk_digest"]
    # mntr counts the root twice, as ZooKeeper does ("" and "/")
    assert info.znodes + 1 == int(mntr["zk_znode_count"]) and "digest match the server's" in out
    assert not list(tmp_path.glob("*.download"))
    code, _, err = admin("snapshot", "save", str(target), "--server", f"127.0.0.1:{zabby_server.admin_port}", *auth)
    assert code == 2 and "exists" in err
    code, _, err = admin("snapshot", "save", str(tmp_path / "no" / "dir.snap"), "--server", f"127.0.0.1:{zabby_server.admin_port}", *auth)
    assert code == 2 and "no such directory" in err


def test_a_wrong_server_is_a_clear_error(zabby_server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = str(out / "x.snap")
    for server, message in ((f"127.0.0.1:{free_port()}", "cannot reach the admin endpoint"),
                            (f"127.0.0.1:{zabby_server.port}", "cannot reach the admin endpoint"),  # the client port
                            ("nowhere", "expected HOST:PORT")):  # fmt: skip
        code, _, err = admin("snapshot", "save", target, "--server", server, "--timeout", "5")
        assert code == (2 if message.startswith("expected") else 3) and message in err, err
    code, _, err = admin("snapshot", "save", target, "--server", f"127.0.0.1:{zabby_server.admin_port}", "--command-url", "/elsewhere")
    assert code == 3 and "404" in err
    assert not list(out.iterdir())


def test_credentials_when_the_server_asks_for_them(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server", **{"admin.console.auth": DIGEST})
    server.start()
    try:
        where = f"127.0.0.1:{server.admin_port}"
        code, _, err = admin("snapshot", "save", str(tmp_path / "a.snap"), "--server", where)
        assert code == 3 and "--auth user:password" in err
        code, _, err = admin("snapshot", "save", str(tmp_path / "a.snap"), "--server", where, "--auth", "admin:wrong")
        assert code == 3
        code, _, err = admin("snapshot", "save", str(tmp_path / "a.snap"), "--server", where, "--auth", "admin:secret")
        assert code == 0, err
    finally:
        server.kill()


class _FakeEndpoint(http.server.BaseHTTPRequestHandler):
    body = b""
    headers_out: dict[str, str] = {}

    def do_GET(self) -> None:  # noqa: N802 - the handler's name
        self.send_response(200)
        for name, value in self.headers_out.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_endpoint() -> Iterator[tuple[str, type[_FakeEndpoint]]]:
    handler = type("Handler", (_FakeEndpoint,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_cut_stream_or_a_wrong_digest_leaves_nothing(fake_endpoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    where, handler = fake_endpoint
    tree = tree_of(TxnMaker().some(200))
    raw = write_snapshot(tmp_path, tree.last_zxid, tree.records()).read_bytes()
    target = tmp_path / "out" / "saved.snap"
    target.parent.mkdir()
    handler.headers_out = {"last_zxid": f"0x{tree.last_zxid:x}", "X-Zabby-Digest": f"0x{tree.digest:016x}"}
    handler.body = raw[: len(raw) // 2]
    code, _, err = admin("snapshot", "save", str(target), "--server", where)
    assert code == 1 and "snapshot" in err and not list(target.parent.iterdir())
    handler.body = raw
    handler.headers_out = {**handler.headers_out, "X-Zabby-Digest": f"0x{tree.digest ^ 1:016x}"}
    code, _, err = admin("snapshot", "save", str(target), "--server", where)
    assert code == 1 and "has digest" in err and not list(target.parent.iterdir())
    handler.headers_out = {}
    code, _, err = admin("snapshot", "save", str(target), "--server", where)
    assert code == 3 and "not a zabby admin endpoint" in err
