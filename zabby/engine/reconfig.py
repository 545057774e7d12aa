"""The leader's preparation of a ``reconfig`` (ZooKeeper 3.5+'s dynamic reconfiguration).

The request names servers joining (``server.N=spec`` lines, comma separated) and leaving
(ids), or the whole new membership; ``from_config`` makes it conditional on the version of
the membership it was computed from.  As ZooKeeper's PrepRequestProcessor, in its order: refused
with RECONFIGDISABLED unless ``reconfigEnabled``, RECONFIGINPROGRESS while another is proposed
and not committed, BADVERSION for a stale ``from_config``, BADARGUMENTS for a request that makes
no valid membership of at least two voters (MARSHALLINGERROR for a server id that is no
number, as ZooKeeper answers it; a leaving id that is no member is ignored), NEWCONFIGNOQUORUM unless a quorum of the new membership is synced with this
leader (it could not commit otherwise), and NOAUTH without WRITE on ``/zookeeper/config`` (or
the super user).  The txn carries the
new membership's text; its version is the txn's zxid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zabby.core.quorum import Majority
from zabby.errors import Err, ZabbyError
from zabby.membership import Membership, MembershipError
from zabby.opcodes import OpCode
from zabby.tree import acl as acls
from zabby.tree.datatree import ZOOKEEPER_CONFIG, DataTree
from zabby.tree.prep import Caller

# ZooKeeper's standaloneEnabled (default true) forbids a membership of fewer voters; zabby has no such key
MIN_VOTERS = 2


def prepare_reconfig(args: tuple[Any, ...], caller: Caller, zxid: int, *, enabled: bool, committed: Membership,
                     in_progress: bool, config_acl: Iterable[acls.ACL], synced: set[int]) -> tuple[int, tuple[Any, ...]]:  # fmt: skip
    """The RECONFIG txn's (type, body).

    Raises:
        ZabbyError: one of the refusals of the module's docstring; BADARGUMENTS for a request
            that does not make a valid membership.
    """
    joining, leaving, new_members, from_config = args
    if not enabled:
        raise ZabbyError(Err.RECONFIGDISABLED, "Reconfig operation requested but reconfig feature is disabled.")
    if in_progress:
        raise ZabbyError(Err.RECONFIGINPROGRESS, "another reconfiguration is in progress")
    if from_config not in (None, -1) and from_config != committed.version:
        raise ZabbyError(Err.BADVERSION, f"the membership is at version {committed.version:x}, not {from_config:x}")
    try:
        if new_members:
            membership = committed.replaced(_items(new_members), zxid)
        else:
            membership = committed.changed(_joining(joining), [_server_id(sid) for sid in _items(leaving)], zxid)
    except MembershipError as exc:
        raise ZabbyError(Err.BADARGUMENTS, f"reconfig: {exc}") from None
    if len(membership.voters) < MIN_VOTERS:
        raise ZabbyError(Err.BADARGUMENTS, f"Reconfig failed - new configuration must include at least {MIN_VOTERS} followers")
    if not Majority(membership.voters).has_quorum(synced):
        raise ZabbyError(Err.NEWCONFIGNOQUORUM, f"no quorum of the new membership ({sorted(membership.voters)}) is synced with the leader")
    # Last, as in ZooKeeper's PrepRequestProcessor: a malformed request is BADARGUMENTS for
    # anyone (kazoo's own test suite asks it so), and nothing it could reveal is secret.
    if not acls.check(tuple(config_acl), acls.WRITE, caller.auth_ids, caller.superuser):
        raise ZabbyError(Err.NOAUTH, "reconfig needs WRITE on /zookeeper/config (or the super user)")
    return OpCode.RECONFIG, (membership.text(),)


def _server_id(text: str) -> int:
    """A server id of the request.  ZooKeeper parses it with Long.parseLong and does not catch
    the NumberFormatException, so its generic handler answers MARSHALLINGERROR: so does zabby.

    Raises:
        ZabbyError: MARSHALLINGERROR for an id that is no number.
    """
    try:
        return int(text.strip())
    except ValueError:
        raise ZabbyError(Err.MARSHALLINGERROR, f"reconfig: server id {text!r} is not a number") from None


def _joining(text: Any) -> list[str]:
    """The joining ``server.N=spec`` lines; a line without ``=`` is BADARGUMENTS (ZooKeeper's
    "Wrong format of server string"), an N that is no number MARSHALLINGERROR (see ``_server_id``)."""
    lines = _items(text)
    for line in lines:
        key, sep, _ = line.partition("=")
        if not sep:
            raise ZabbyError(Err.BADARGUMENTS, f"reconfig: Wrong format of server string {line!r}")
        _server_id(key.rpartition(".")[2])
    return lines


def _items(text: Any) -> list[str]:
    """A comma-separated list (ZooKeeper's form), or a list already."""
    if not text:
        return []
    if isinstance(text, str):
        return [item.strip() for item in text.split(",") if item.strip()]
    return [str(item).strip() for item in text]


def logged_membership(tree: DataTree, committed: Membership | None) -> Membership | None:
    """A membership a RECONFIG txn of the log names, newer than the committed one: the
    configuration files are written once it commits, so until then it is only proposed."""
    node = tree.nodes[ZOOKEEPER_CONFIG]
    if not node.data or committed is None:
        return None
    membership = Membership.parse(node.data.decode())
    return membership if membership.version > committed.version else None
