"""The leader's preparation of a ``reconfig`` (ZooKeeper 3.5+'s dynamic reconfiguration).

The request names servers joining (``server.N=spec`` lines, comma separated) and leaving
(ids), or the whole new membership; ``from_config`` makes it conditional on the version of
the membership it was computed from.  As ZooKeeper's PrepRequestProcessor, in its order: refused
with RECONFIGDISABLED unless ``reconfigEnabled``, RECONFIGINPROGRESS while another is proposed
and not committed, BADVERSION for a stale ``from_config``, BADARGUMENTS for a request that makes
no valid membership, NEWCONFIGNOQUORUM unless a quorum of the new membership is synced with this
leader (it could not commit otherwise), and NOAUTH without WRITE on ``/zookeeper/config`` (or
the super user).  The txn carries the
new membership's text; its version is the txn's zxid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zabby.core.quorum import Majority
from zabby.errors import Err, ZabbyError
from zabby.membership import Membership
from zabby.opcodes import OpCode
from zabby.tree import acl as acls
from zabby.tree.datatree import ZOOKEEPER_CONFIG, DataTree
from zabby.tree.prep import Caller


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
            membership = committed.changed(_items(joining), [int(sid) for sid in _items(leaving)], zxid)
    except ValueError as exc:  # a MembershipError, or a leaving id that is no number
        raise ZabbyError(Err.BADARGUMENTS, f"reconfig: {exc}") from None
    if not Majority(membership.voters).has_quorum(synced):
        raise ZabbyError(Err.NEWCONFIGNOQUORUM, f"no quorum of the new membership ({sorted(membership.voters)}) is synced with the leader")
    # Last, as in ZooKeeper's PrepRequestProcessor: a malformed request is BADARGUMENTS for
    # anyone (kazoo's own test suite asks it so), and nothing it could reveal is secret.
    if not acls.check(tuple(config_acl), acls.WRITE, caller.auth_ids, caller.superuser):
        raise ZabbyError(Err.NOAUTH, "reconfig needs WRITE on /zookeeper/config (or the super user)")
    return OpCode.RECONFIG, (membership.text(),)


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
    if not node.version or committed is None:
        return None
    membership = Membership.parse(node.data.decode())
    return membership if membership.version > committed.version else None
