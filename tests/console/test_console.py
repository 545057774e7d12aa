"""The web console in headless Chromium (Debian's, installed by scripts/install_chromium.sh):
credentials asked for, the ensemble's servers, the tree browser with paging and its three
views of data, sessions and watches.  ``ZABBY_UPDATE_SCREENSHOTS=1`` writes the screenshots
into docs/ (docs/operations.md shows them); otherwise they go to the test's folder.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ROOT
from tests.console.cdp import Browser, Page
from tests.debian import installed
from zabby import SyncClient
from zabby.testing import Ensemble, ServerProcess

DIGEST = "admin:fvr2cB/fjGeAiX8g1aGhUm3ZICk="  # zabby-admin digest admin:secret
BASIC = "Basic " + base64.b64encode(b"admin:secret").decode()
PROJECT = {"name": "demo", "owner": "data-eng", "models": ["sales_model"], "cubes": ["sales_cube"]}
CUBE = {"name": "sales_cube", "status": "READY", "segments": [{"id": "3f2a9c", "name": "20240101_20240301", "rows": 5332}]}


@pytest.fixture(scope="module")
def chromium() -> str:
    """The path of Chromium, installing Debian's package when it is missing."""
    return installed("install_chromium.sh")


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ensemble]:
    """3 servers asking for the console's credentials, holding a small Kylin-like tree, a
    session with an ephemeral node and a watch (the client stays connected)."""
    ens = Ensemble(tmp_path_factory.mktemp("console"), 3, tickTime=200, **{"admin.console.auth": DIGEST})
    ens.start()
    ens.wait_leader()
    client = SyncClient(ens.hosts, timeout=10.0)
    client.start()
    try:
        _populate(client)
        yield ens
    finally:
        client.stop()
        client.close()
        ens.kill_all()


def _populate(client: SyncClient) -> None:
    client.create("/kylin/demo", json.dumps(PROJECT).encode(), makepath=True)
    client.create("/kylin/demo/cube/sales_cube", json.dumps(CUBE).encode(), makepath=True)
    client.create("/kylin/demo/project", b"demo project: sales cube, built nightly", makepath=True)
    client.create("/kylin/demo/blob", bytes(range(40)))
    tx = client.transaction()
    for index in range(250):
        tx.create(f"/kylin/demo/audit-{index:04d}", f"entry {index}".encode())
    tx.commit()
    client.create("/kylin/demo/epoch", b"", ephemeral=True)
    client.get("/kylin/demo/project", watch=lambda event: None)


@pytest.fixture
def page(chromium: str, tmp_path: Path) -> Iterator[Page]:
    browser = Browser(chromium, tmp_path / "profile")
    tab = browser.new_page()
    try:
        yield tab
    finally:
        tab.close()
        browser.close()


def _url(ens: Ensemble, view: str) -> str:
    leader = ens.servers[ens.wait_leader()]
    return f"http://127.0.0.1:{leader.admin_port}/console#{view}"


def _show(tab: Page, ens: Ensemble, view: str) -> None:
    tab.goto(_url(ens, view))
    tab.wait_for(f"document.body.dataset.loaded === {json.dumps(view)}")


def _screenshot(tab: Page, name: str, tmp_path: Path, height: int) -> Path:
    folder = ROOT / "docs" if os.environ.get("ZABBY_UPDATE_SCREENSHOTS") else tmp_path
    path = folder / f"console-{name}.png"
    tab.screenshot(path, 1280, height)
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", raw[16:24]) == (1280, height)
    return path


def test_the_console_asks_for_credentials(ensemble: Ensemble, page: Page) -> None:
    page.goto(_url(ensemble, "ensemble"))
    assert page.evaluate("document.querySelector('#ensemble-table')") is None  # the page itself was refused
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(_url(ensemble, "x").split("#")[0] + "/api/server", timeout=10)
    assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Basic")


def test_ensemble_status_one_row_per_server(ensemble: Ensemble, page: Page, tmp_path: Path) -> None:
    page.set_headers({"Authorization": BASIC})
    _show(page, ensemble, "ensemble")
    rows = page.evaluate("[...document.querySelectorAll('#ensemble-table tbody tr')].map(r => [...r.cells].map(c => c.innerText))")
    assert len(rows) == 3 and sorted(row[2] for row in rows) == ["follower", "follower", "leader"]
    assert len({row[3] for row in rows}) == 1 and len({row[4] for row in rows}) == 1  # one zxid, one digest
    assert all(row[5] == "0" and row[6].isdigit() and " / " in row[7] for row in rows)
    _screenshot(page, "ensemble", tmp_path, 330)


def test_tree_browser_pages_children_and_shows_data_three_ways(ensemble: Ensemble, page: Page, tmp_path: Path) -> None:
    page.set_headers({"Authorization": BASIC})
    _show(page, ensemble, "tree:/kylin/demo")
    assert page.text("#children-range") == "1–100 of 254"
    page.click("#next-page")
    page.wait_for("document.getElementById('children-range').innerText === '101–200 of 254'")
    assert page.text("#children li:first-child") == "audit-0100"
    page.click("#prev-page")
    page.wait_for("document.getElementById('children-range').innerText.startsWith('1–100')")
    assert json.loads(page.text("#data-view")) == PROJECT and "numChildren\t254" in page.text("#stat-table")
    _screenshot(page, "tree", tmp_path, 900)
    _show(page, ensemble, "tree:/kylin/demo/cube/sales_cube")
    assert json.loads(page.text("#data-view")) == CUBE and '\n  "status": "READY"' in page.text("#data-view")
    assert "numChildren\t0" in page.text("#stat-table") and "world:anyone:rwcda" in page.text("#acl")
    page.click("#data-hex")
    hex_view = page.text("#data-view")
    assert hex_view.startswith("00000000  7b 22 6e 61 6d 65 22 3a") and '{"name": "sales_' in hex_view
    _show(page, ensemble, "tree:/kylin/demo/blob")
    assert page.evaluate("document.getElementById('data-hex').classList.contains('on')")
    assert page.text("#data-view").startswith("00000000  00 01 02 03")
    page.click("#data-json")
    assert page.text("#data-view").startswith("(not json:")
    page.click("#data-text")
    assert page.text("#data-view").endswith("!\"#$%&'")  # bytes 0x00..0x27 decode as UTF-8


def test_sessions_and_watches(ensemble: Ensemble, page: Page, tmp_path: Path) -> None:
    page.set_headers({"Authorization": BASIC})
    leader = ensemble.servers[ensemble.wait_leader()]
    with SyncClient(leader.hosts, timeout=10.0) as client:  # a session on the leader itself
        client.create("/kylin/demo/driver", b"", ephemeral=True)
        client.exists("/kylin/demo/cube/sales_cube", watch=lambda event: None)
        _show(page, ensemble, "sessions")
        sessions = page.text("#sessions-table")
        assert f"0x{client.client_id[0]:x}" in sessions and "/kylin/demo/driver" in sessions and "127.0.0.1:" in sessions
        _screenshot(page, "sessions", tmp_path, 300)
        _show(page, ensemble, "watches")
        assert f"/kylin/demo/cube/sales_cube\t0x{client.client_id[0]:x}" in page.text("#watches-table")
        assert re.fullmatch(r"\d+ connections watching \d+ paths, \d+ watches in all", page.text("#watches-summary"))


def test_the_console_answers_on_its_address_only(tmp_path: Path) -> None:
    """A console bound to another address than the one requests arrive on (here one this
    machine does not even have) refuses them, while /metrics is served."""
    server = ServerProcess(tmp_path / "server", **{"admin.console.address": "192.0.2.1"})
    server.start()
    try:
        base = f"http://127.0.0.1:{server.admin_port}"
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
            assert b"zabby_serving" in answer.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/console", timeout=10)
        assert refused.value.code == 403 and b"192.0.2.1 only" in refused.value.read()
    finally:
        server.kill()
