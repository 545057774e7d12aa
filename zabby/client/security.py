"""ACLs in kazoo's shape: ``ACL(perms, Id(scheme, id))`` namedtuples, plus the helpers.

On the wire an ACL entry is ``[perms, scheme, id]`` (docs/protocol.md); ``acl_to_wire``
accepts kazoo-shaped ``ACL`` values and flat ``(perms, scheme, id)`` tuples alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from zabby.tree.acl import digest


class Id(NamedTuple):
    scheme: str
    id: str


class ACL(NamedTuple):
    perms: int
    id: Id

    @property
    def acl_list(self) -> list[str]:
        if self.perms & Permissions.ALL == Permissions.ALL:
            return ["ALL"]
        names = ("READ", "WRITE", "CREATE", "DELETE", "ADMIN")
        return [name for name in names if self.perms & getattr(Permissions, name)]


class Permissions:
    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


ANYONE_ID_UNSAFE = Id("world", "anyone")
AUTH_IDS = Id("auth", "")
OPEN_ACL_UNSAFE = [ACL(Permissions.ALL, ANYONE_ID_UNSAFE)]
CREATOR_ALL_ACL = [ACL(Permissions.ALL, AUTH_IDS)]
READ_ACL_UNSAFE = [ACL(Permissions.READ, ANYONE_ID_UNSAFE)]


def make_digest_acl_credential(username: str, password: str) -> str:
    """``user:base64(sha1(user:password))``, ZooKeeper's digest id."""
    return digest(username, password)


def make_acl(
    scheme: str,
    credential: str,
    read: bool = False,
    write: bool = False,
    create: bool = False,
    delete: bool = False,
    admin: bool = False,
    all: bool = False,  # noqa: A002 - kazoo's parameter name
) -> ACL:
    if all:
        perms = Permissions.ALL
    else:
        flags = ((read, 1), (write, 2), (create, 4), (delete, 8), (admin, 16))
        perms = sum(bit for on, bit in flags if on)
    return ACL(perms, Id(scheme, credential))


def make_digest_acl(
    username: str,
    password: str,
    read: bool = False,
    write: bool = False,
    create: bool = False,
    delete: bool = False,
    admin: bool = False,
    all: bool = False,  # noqa: A002
) -> ACL:
    cred = make_digest_acl_credential(username, password)
    return make_acl("digest", cred, read=read, write=write, create=create, delete=delete, admin=admin, all=all)


def acl_to_wire(acls: Iterable[Any]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for entry in acls:
        if isinstance(entry, ACL) or (len(entry) == 2 and not isinstance(entry[1], str)):
            perms, ident = entry
            out.append([int(perms), str(ident[0]), str(ident[1])])
        else:
            perms, scheme, ident_s = entry
            out.append([int(perms), str(scheme), str(ident_s)])
    return out


def acl_from_wire(value: list[list[Any]]) -> list[ACL]:
    return [ACL(perms, Id(scheme, ident)) for perms, scheme, ident in value]
