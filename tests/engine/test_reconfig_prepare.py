"""The leader's checks of a reconfig request, in ZooKeeper's order (PrepRequestProcessor): a
malformed request is BADARGUMENTS for anyone, the ACL of /zookeeper/config comes last; the
answer's text is ZooKeeper's (no newline after the version line)."""

from __future__ import annotations

import pytest

from zabby.engine.reconfig import prepare_reconfig
from zabby.errors import Err, ZabbyError
from zabby.membership import Member, Membership
from zabby.tree import acl as acls
from zabby.tree.prep import Caller

THREE = Membership.of([Member(sid, "127.0.0.1", 2000 + sid, 3000 + sid, client_port=4000 + sid) for sid in (1, 2, 3)], 0x100000000)
ADMIN_ONLY = ((acls.ALL, "digest", acls.digest("super", "pw")),)
NOBODY = Caller(7, [("ip", "127.0.0.1")])


def _prepare(joining: str | None, leaving: str | None, caller: Caller = NOBODY, from_config: int = -1) -> tuple[int, tuple]:
    return prepare_reconfig((joining, leaving, None, from_config), caller, 0x100000009, enabled=True, committed=THREE,
                            in_progress=False, config_acl=ADMIN_ONLY, synced={1, 2, 3})  # fmt: skip


@pytest.mark.parametrize(("joining", "leaving", "code"), [
    ("some thing", None, Err.BADARGUMENTS), ("server.9=nohost", None, Err.BADARGUMENTS), (None, "1,2", Err.BADARGUMENTS),
    (None, "abc", Err.MARSHALLINGERROR), ("server.x=127.0.0.1:1:2;3", None, Err.MARSHALLINGERROR),
])  # fmt: skip
def test_a_malformed_request_is_refused_before_the_acl_is_checked(joining: str | None, leaving: str | None, code: Err) -> None:
    """As ZooKeeper 3.8 answers (compared through its Java client: harness/differential/reconfig.py):
    fewer than two voters is BADARGUMENTS; an id that is no number MARSHALLINGERROR (its
    NumberFormatException is not caught)."""
    with pytest.raises(ZabbyError) as info:
        _prepare(joining, leaving)
    assert info.value.code == code


def test_a_leaving_id_that_is_no_member_is_ignored() -> None:
    _, (text,) = _prepare(None, "9", Caller(7, [], superuser=True))
    assert text == THREE.with_version(0x100000009).text()


def test_a_valid_request_without_write_on_the_config_node_is_no_auth() -> None:
    with pytest.raises(ZabbyError) as info:
        _prepare(None, "3")
    assert info.value.code == Err.NOAUTH
    with pytest.raises(ZabbyError) as info:
        _prepare(None, "3", from_config=5)
    assert info.value.code == Err.BADVERSION  # as ZooKeeper: the version is checked before


def test_the_new_membership_text_ends_with_its_version_line() -> None:
    _, (text,) = _prepare(None, "3", Caller(7, [], superuser=True))
    assert text.split("\n")[-1] == "version=100000009" and "server.3=" not in text
    assert text == THREE.changed([], [3], 0x100000009).text()
