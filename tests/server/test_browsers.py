"""The admin port's rules against hostile pages in its users' browsers (zabby.server.adminport.browsers)."""

from __future__ import annotations

from pathlib import Path

from zabby.config import ServerConfig
from zabby.membership import Member
from zabby.server.adminport.browsers import HostNames, host_name, page_policy, refusal
from zabby.server.adminport.http import Request


def test_a_host_is_named_without_its_port_brackets_case_or_final_dot() -> None:
    assert [host_name(h) for h in ("ZK1.Example.com.:8080", "[::1]:8080", "127.0.0.1", "::1")] == ["zk1.example.com", "::1", "127.0.0.1", "::1"]


def test_the_names_of_this_server() -> None:
    config = ServerConfig(Path("/x"), Path("/x"), peers=(Member(1, "zk1.internal", 1, 1), Member(2, "zk2.internal", 1, 1)),
                          admin_allowed_hosts=("metrics.example",))  # fmt: skip
    names = HostNames.of(config)
    allowed = ["zk2.internal:8080", "localhost", "app.localhost", "10.1.2.3:8080", "[fe80::1]", "metrics.example"]
    assert all(names.allows(host) for host in allowed)
    assert not any(names.allows(host) for host in ("evil.example", "zk1.internal.evil.example", "localhost.evil.example"))
    assert HostNames.of(ServerConfig(Path("/x"), Path("/x"), admin_allowed_hosts=("*",))).allows("anything.example")


def _post(**headers: str) -> Request:
    return Request("POST", "/commands/srst", {"host": "127.0.0.1:8080", **headers}, "127.0.0.1")


def test_what_changes_state_must_come_from_this_origin() -> None:
    names = HostNames.of(ServerConfig(Path("/x"), Path("/x")))
    assert refusal(_post(), names, changes_state=True) is None
    assert refusal(_post(origin="http://127.0.0.1:8080"), names, changes_state=True) is None
    for forged in ({"origin": "http://127.0.0.1:9999"}, {"origin": "null"}, {"origin": "http://evil.example"},
                   {"sec-fetch-site": "same-site"}, {"sec-fetch-site": "cross-site"}):  # fmt: skip
        answer = refusal(_post(**forged), names, changes_state=True)
        assert answer is not None and answer.status.startswith("403"), forged
    assert refusal(_post(origin="http://evil.example"), names, changes_state=False) is None  # a read: the browser keeps its answer from the page


def test_the_console_page_policy_names_its_inline_script_and_style_by_hash() -> None:
    policy = page_policy(b"<style>a{}</style><script>go()</script>")
    assert "script-src 'sha256-" in policy and "style-src 'sha256-" in policy and "'unsafe-inline'" not in policy
    assert page_policy(b"<script>other()</script>") != page_policy(b"<script>go()</script>")
