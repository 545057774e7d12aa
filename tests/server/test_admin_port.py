"""The admin HTTP port against callers that are not the administrator (issue 56): its
connections are bounded, its deadlines short, guessing its password slow, its answers
framed for browsers that visit hostile pages."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.jepsen import hostile, hostile_ports
from harness.jepsen.hostile_ports import http_request
from harness.local.admin import LOCAL_ADMIN, admin_json, admin_settings
from harness.local.jute_session import OPEN_ACL, JuteSession
from zabby.opcodes import OpCode
from zabby.server.adminport.browsers import page_policy
from zabby.server.clients.throttle import ATTEMPTS_BURST, ATTEMPTS_PER_S
from zabby.testing import ServerProcess, wait_until
from zabby.tree.acl import digest
from zabby.wire import jute


@pytest.fixture
def admin_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path, **{"admin.maxConnections": 6, "admin.maxConnectionsPerHost": 3, "admin.idleTimeout": 1000})
    server.start()
    try:
        yield server
    finally:
        server.kill()


def _idle(port: int, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.sendall(b"GET /commands/srvr HTTP/1.1\r\n")  # and never the rest of the head
    return sock


def _answer(sock: socket.socket, wait_s: float = 3.0) -> bytes:
    sock.settimeout(wait_s)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except TimeoutError:
        return b"(still open)"
    return b"".join(chunks)


def test_admin_connections_are_bounded_per_source_and_in_all(admin_server: ServerProcess) -> None:
    """The admin port took any number of connections and held each idle one for 10 s: a
    flood used up the process's descriptors."""
    port = admin_server.admin_port
    held = [_idle(port, "127.0.0.2") for _ in range(3)]
    fourth = _idle(port, "127.0.0.2")
    assert _answer(fourth).startswith(b"HTTP/1.1 503 ")  # 3 from one source at most
    held += [_idle(port, "127.0.0.3") for _ in range(3)]
    assert http_request(port, "GET", "/commands/srvr", source="127.0.0.4").status == 503  # 6 in all
    for sock in held:
        sock.close()
    time.sleep(0.2)
    assert http_request(port, "GET", "/commands/srvr").status == 200


def test_a_request_head_must_come_within_the_idle_timeout(admin_server: ServerProcess) -> None:
    """A head sent one byte at a time held its connection for 10 s; now admin.idleTimeout
    (here 1 s) bounds the whole head, however it trickles."""
    sock = socket.create_connection(("127.0.0.1", admin_server.admin_port), timeout=5)
    started = time.monotonic()
    closed = False
    with sock:
        for byte in b"GET /commands/srvr HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 40:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
            sock.setblocking(False)
            try:
                closed = sock.recv(65536) is not None
            except BlockingIOError:
                pass
            sock.setblocking(True)
            if closed:
                break
    assert closed and time.monotonic() - started < 3.0


@pytest.fixture
def guarded_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path, maxSessionTimeout=60_000, **admin_settings())  # the watch hoarders' sessions outlive the test
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_guessing_the_admin_password_is_slowed_by_source(guarded_server: ServerProcess) -> None:
    """HTTP Basic credentials could be tried 2,950 times a second (8,865 in 3 s here), with
    no delay."""
    outcome = hostile_ports.admin_guess(guarded_server.admin_port, seconds=3.0, threads=16)
    checked = outcome.errors.get(401, 0)
    assert checked <= ATTEMPTS_BURST + ATTEMPTS_PER_S * outcome.elapsed_s + 2, outcome  # zabby.server.clients.throttle's bucket
    assert outcome.errors.get(429, 0) > 0 and set(outcome.errors) <= {401, 429, 503}, outcome  # 503: 8 connections from one source


def test_over_its_rate_a_right_password_is_refused_unchecked_as_a_wrong_one(guarded_server: ServerProcess) -> None:
    """A right answer came at once where a wrong one was slowed: silence meant "wrong".  Now
    the source's token is taken before the credentials are looked at: over its rate, right
    and wrong get the same 429 at once; another source is not held back."""
    port = guarded_server.admin_port
    for index in range(int(ATTEMPTS_BURST)):  # the burst, used up by wrong guesses
        http_request(port, "GET", "/commands/cons", {"Authorization": hostile_ports.basic("admin", f"wrong-{index}")})
    right = http_request(port, "GET", "/commands/cons", {"Authorization": hostile_ports.basic(*LOCAL_ADMIN)})
    wrong = http_request(port, "GET", "/commands/cons", {"Authorization": hostile_ports.basic("admin", "wrong-again")})
    assert (right.status, right.body) == (wrong.status, wrong.body) and right.status == 429
    assert http_request(port, "GET", "/commands/cons", {"Authorization": hostile_ports.basic(*LOCAL_ADMIN)}, source="127.0.0.2").status == 200


def test_no_configuration_view_shows_a_secret(tmp_path: Path) -> None:
    """initial_configuration showed superDigest's and admin.console.auth's digests (unsalted
    SHA-1: guessable offline) to whoever read it."""
    super_digest = digest("super", "the super password")
    server = ServerProcess(tmp_path, superDigest=super_digest, **admin_settings(), **{"ssl.quorum.keyStore.password": "pem-pass"})
    server.start()
    try:
        shown = [json.dumps(admin_json(server.admin_port, word)) for word in ("icfg", "conf", "envi", "srvr", "mntr")]
        shown += [server.four_letter(word) for word in ("conf", "envi")]
        shown.append(http_request(server.admin_port, "GET", "/console/api/server", {"Authorization": hostile_ports.basic(*LOCAL_ADMIN)}).body.decode())
        secrets = (super_digest.split(":")[1], admin_settings()["admin.console.auth"].split(":")[1], "pem-pass")
        assert "superDigest=********" in shown[0]
        assert not [secret for secret in secrets for text in shown if secret in text]
    finally:
        server.kill()


def _as_admin(**headers: str) -> dict[str, str]:
    return {"Authorization": hostile_ports.basic(*LOCAL_ADMIN), **headers}


def test_a_page_elsewhere_can_neither_reset_counters_nor_reach_the_console_by_rebinding(guarded_server: ServerProcess) -> None:
    """The admin port checked neither Origin (a cross-site form could POST the counter resets,
    with the credentials the administrator's browser keeps) nor Host (a page whose name was
    rebound to this server reached the console as its own origin)."""
    port = guarded_server.admin_port
    own = f"127.0.0.1:{port}"
    guarded_server.four_letter("srvr")  # a packet counted, for srst to reset
    for forged in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
        assert http_request(port, "POST", "/commands/srst", _as_admin(**forged)).status == 403, forged
    assert int(guarded_server.mntr()["zk_packets_received"]) > 0  # nothing was reset
    assert http_request(port, "GET", "/commands/snapshot", _as_admin(Origin="http://evil.example")).status == 403
    assert http_request(port, "POST", "/commands/srst", _as_admin(Origin=f"http://{own}", **{"Sec-Fetch-Site": "same-origin"})).status == 200
    assert http_request(port, "POST", "/commands/srst", _as_admin()).status == 200  # a script: no Origin
    assert http_request(port, "GET", "/console/api/sessions", _as_admin(Host=f"rebound.evil.example:{port}")).status == 403
    for host in (own, f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert http_request(port, "GET", "/console/api/server", _as_admin(Host=host)).status == 200, host


def test_every_answer_is_framed_for_browsers(guarded_server: ServerProcess) -> None:
    """No X-Frame-Options, X-Content-Type-Options or Content-Security-Policy was sent."""
    port = guarded_server.admin_port
    answers = [http_request(port, "GET", path, _as_admin()) for path in ("/commands/srvr", "/metrics", "/console/api/server", "/nowhere")]
    answers.append(http_request(port, "GET", "/console/api/server", _as_admin(Host="evil.example")))
    for answer in answers:
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    page = http_request(port, "GET", "/console", _as_admin())
    assert page.status == 200 and page.headers["content-security-policy"] == page_policy(page.body)
    assert "'unsafe-inline'" not in page.headers["content-security-policy"]


def test_allowed_hosts_adds_names_and_star_allows_any(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, **{"admin.allowedHosts": "zk.example.com, monitor.internal"})
    server.start()
    try:
        for host, status in (("zk.example.com:8080", 200), ("MONITOR.internal.", 200), ("other.example.com", 403)):
            assert http_request(server.admin_port, "GET", "/commands/srvr", {"Host": host}).status == status, host
    finally:
        server.kill()


def test_watch_listings_are_cut_at_watch_list_max_and_stall_nobody(guarded_server: ServerProcess) -> None:
    """wchc, wchp and the console's watches built the whole listing at once: 2.9 s of a
    stopped event loop for 640,000 watches (here 400,000: 0.7 to 1 s each)."""
    stop = threading.Event()
    holders = [threading.Thread(target=hostile.watch_hoard, args=(("127.0.0.1", guarded_server.port),),
                                kwargs={"watches": 50_000, "hold_s": 60.0, "stop": stop, "timeout_ms": 60_000}, daemon=True) for _ in range(8)]  # fmt: skip
    try:
        for holder in holders:
            holder.start()
        wait_until(lambda: guarded_server.mntr()["zk_watch_count"] == "400000", 60, "400,000 watches")
        bystander = hostile.Bystander(("127.0.0.1", guarded_server.port)).start()
        listings = {path: http_request(guarded_server.admin_port, "GET", path, _as_admin()) for path in
                    ("/commands/wchc", "/commands/wchp", "/console/api/watches", "/commands/wchs")}  # fmt: skip
        text = guarded_server.four_letter("wchp")
        figures = bystander.stop()
    finally:
        stop.set()
    bodies = {path: json.loads(answer.body) for path, answer in listings.items()}
    assert all(answer.seconds < 0.3 for answer in listings.values()), {path: answer.seconds for path, answer in listings.items()}
    for path in ("/commands/wchc", "/commands/wchp", "/console/api/watches"):
        assert bodies[path]["cut"]["listed"] == 10_000 and bodies[path]["cut"]["total"] == 400_000, path
    assert sum(len(paths) for paths in bodies["/commands/wchc"]["session_id_to_watched_paths"].values()) == 10_000
    assert (bodies["/commands/wchs"]["num_connections"], bodies["/commands/wchs"]["num_paths"]) == (8, 50_000)
    assert text.endswith("(cut: 10000 of 400000 watches listed; watchListMax)\n")
    assert figures.max_ms < 250, figures


def test_a_snapshot_download_that_stops_reading_is_cut(guarded_server: ServerProcess) -> None:
    """A download that stopped reading held the one snapshot stream (and its forked child)
    for as long as its connection lived: every other download was refused 429."""
    with JuteSession(guarded_server.port) as session:
        session.connect()
        for index in range(8):  # 7 MB of tree: more than the socket's and the pipe's buffers
            session.call(OpCode.CREATE, jute.CreateRequest(f"/big-{index}", b"x" * 900_000, OPEN_ACL, 0))
    port = guarded_server.admin_port
    stalled = socket.create_connection(("127.0.0.1", port), timeout=5)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    head = f"GET /commands/snapshot HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: {hostile_ports.basic(*LOCAL_ADMIN)}\r\n\r\n"
    with stalled:
        stalled.sendall(head.encode())
        time.sleep(0.5)
        assert http_request(port, "GET", "/commands/snapshot", _as_admin()).status == 429
        time.sleep(3.0)  # admin.idleTimeout (2 s) without progress: cut
        download = http_request(port, "GET", "/commands/snapshot", _as_admin(), timeout_s=30)
    assert download.status == 200 and len(download.body) > 7_000_000


def test_a_request_head_is_read_up_to_8_kib(admin_server: ServerProcess) -> None:
    """The server reads 8 KiB of a head at most, answers, and closes (a reset: the rest of
    what was sent is unread)."""
    sock = socket.create_connection(("127.0.0.1", admin_server.admin_port), timeout=5)
    with sock:
        try:
            sock.sendall(b"GET /commands/srvr HTTP/1.1\r\nX-Long: " + b"x" * 200_000)
            ended = _answer(sock)
        except OSError:
            ended = b"(reset)"
        assert ended != b"(still open)"
    assert http_request(admin_server.admin_port, "GET", "/commands/srvr").status == 200
