"""Who may see the console: the address a request arrived on, and HTTP Basic credentials
checked against the digest of admin.console.auth."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from zabby.config import ServerConfig
from zabby.server.adminport.console import authorized, refusal
from zabby.server.adminport.http import Request

DIGEST = "admin:fvr2cB/fjGeAiX8g1aGhUm3ZICk="  # zabby-admin digest admin:secret


def request(local_address: str, authorization: str | None = None) -> Request:
    headers = {"authorization": authorization} if authorization else {}
    return Request("GET", "/console", headers, local_address)


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


CONFIG = ServerConfig(data_dir=Path("/nowhere"), data_log_dir=Path("/nowhere"))


@pytest.mark.parametrize("console_address, local, allowed", [
    ("127.0.0.1", "127.0.0.1", True), ("127.0.0.1", "::1", True), ("127.0.0.1", "::ffff:127.0.0.1", True),
    ("127.0.0.1", "10.1.2.3", False), ("127.0.0.1", "127.0.0.2", True), ("10.1.2.3", "127.0.0.1", False),
    ("10.1.2.3", "10.1.2.3", True), ("0.0.0.0", "10.1.2.3", True),
])  # fmt: skip
def test_the_console_answers_on_its_address(console_address: str, local: str, allowed: bool) -> None:
    config = dataclasses.replace(CONFIG, console_address=console_address)
    answer = refusal(config, request(local), admin=False)
    assert (answer is None) == allowed
    if not allowed:
        assert answer is not None and answer.status.startswith("403")


def test_credentials_are_checked_against_the_digest() -> None:
    config = dataclasses.replace(CONFIG, console_auth=DIGEST)
    assert authorized(DIGEST, basic("admin:secret"))
    for header in (None, basic("admin:wrong"), basic("root:secret"), basic("adminsecret"), "Basic !!!", "Bearer x"):
        assert not authorized(DIGEST, header)
        answer = refusal(config, request("127.0.0.1", header))
        assert answer is not None and answer.status.startswith("401") and ("WWW-Authenticate", 'Basic realm="zabby console", charset="UTF-8"') in answer.headers
    assert refusal(config, request("127.0.0.1", basic("admin:secret"))) is None


def test_what_needs_an_administrator_is_refused_where_none_is_configured() -> None:
    """The sessions and watches pages, the snapshot and the admin words answered without
    credentials even with admin.console.auth set (issue 43); with no administrator at all
    they are refused, and the rest of the console stays open on its address."""
    answer = refusal(CONFIG, request("127.0.0.1", basic("admin:secret")))
    assert answer is not None and answer.status.startswith("403") and b"admin.console.auth" in answer.body
    assert refusal(CONFIG, request("127.0.0.1"), admin=False) is None
    super_user = dataclasses.replace(CONFIG, super_digest=DIGEST)  # superDigest's user is an administrator too
    assert refusal(super_user, request("127.0.0.1", basic("admin:secret"))) is None
    refused = refusal(super_user, request("127.0.0.1", basic("admin:wrong")))
    assert refused is not None and refused.status.startswith("401")
