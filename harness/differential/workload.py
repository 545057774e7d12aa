"""A seeded random sequence of client operations under one root path.

The workload picks each op from what it has seen so far: paths it saw created and not yet
deleted, plus fresh names, so that most ops meet an existing node and some meet a missing
one, an existing name, a wrong version or an ACL that denies them.  It learns from the
reference system's results (``observe``); the runner stops a seed at its first divergence,
so up to that point both systems answered alike and the sequence is the same for both.

Reaping is kept free of timing races: a TTL node either lives far longer than a run
(``TTL_LONG_MS``) or expires at once (``TTL_SHORT_MS``), and the executor waits after each
write until every container and short-TTL node that is due has been reaped.

The workload steers around the differences listed in ``harness.differential.known``:

* sessions a and b set one-shot watches only, session c persistent ones only, one mode per
  path, and c removes them with type Any only (ZooKeeper 3.8.0 keeps one watch mode per path
  and session, and removes half a persistent watch by type Data or Children); watcher types
  are 1-3;
* exists and addWatch go only to nodes the session may read, or to missing ones, as far as
  the workload's model of ACLs and identities tells (zabby checks READ there, as 3.8.4 does);
* checkWatches goes only to paths no other session ever watched (ZooKeeper 3.8.0 answers OK
  when any session watches the path);
* no create2 inside a multi.
"""

from __future__ import annotations

import base64
import hashlib
import random
from typing import Any

from kazoo.protocol.paths import normpath

from harness.differential.model import CLIENT_USER, CLIENTS, CREDENTIALS, ACLEntry, Op
from zabby.opcodes import CreateMode, WatcherType
from zabby.tree.acl import READ

TTL_LONG_MS = 3_600_000
TTL_SHORT_MS = 1
NAMES = ("a", "b", "c", "d", "e")
DEPTH_MAX = 4  # levels below the root
ODD_PATH_PROBABILITY = 0.04
PERSISTENT_WATCHER = "c"  # the one session that sets persistent watches (and no one-shot ones)
ONE_SHOT_TYPES = (WatcherType.CHILDREN, WatcherType.DATA, WatcherType.ANY)

READ_KINDS = frozenset({"get", "exists", "children", "get_acl", "sync", "multi_read", "ephemerals",
                        "all_children", "check_watches", "who_am_i"})  # fmt: skip

WEIGHTS = {
    "create": 22, "delete": 10, "set": 9, "get": 7, "exists": 7, "children": 7, "get_acl": 3,
    "set_acl": 4, "sync": 1, "multi": 8, "multi_read": 3, "ephemerals": 2, "all_children": 2,
    "add_watch": 3, "remove_watches": 2, "check_watches": 2, "who_am_i": 1, "reopen": 2, "add_auth": 1,
}  # fmt: skip

CREATE_MODES = (
    (CreateMode.PERSISTENT, 30), (CreateMode.EPHEMERAL, 14), (CreateMode.PERSISTENT_SEQUENTIAL, 14),
    (CreateMode.EPHEMERAL_SEQUENTIAL, 10), (CreateMode.CONTAINER, 14), (CreateMode.PERSISTENT_WITH_TTL, 12),
    (CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, 6),
)  # fmt: skip


def digest_id(user: str) -> str:
    """The id of a digest ACL entry: ``user:base64(sha1("user:password"))``."""
    raw = f"{user}:{CREDENTIALS[user]}".encode()
    return f"{user}:{base64.b64encode(hashlib.sha1(raw).digest()).decode()}"


def acl_choices() -> list[tuple[ACLEntry, ...]]:
    """Valid lists that grant someone something, and a few that ZooKeeper rejects."""
    bob, carol = digest_id("bob"), digest_id("carol")
    return [
        ((31, "world", "anyone"),),
        ((1, "world", "anyone"),),
        ((31, "digest", bob),),
        ((31, "digest", bob), (1, "world", "anyone")),
        ((17, "digest", carol), (12, "world", "anyone")),
        ((31, "auth", ""),),  # the caller's own ids: INVALIDACL for a session without any
        ((31, "ip", "127.0.0.1"),),
        ((31, "ip", "10.0.0.0/8"), (3, "world", "anyone")),
        ((31, "world", "anyone"), (31, "world", "anyone")),  # a duplicate entry
        ((31, "nosuchscheme", "x"),),
        ((31, "digest", "bob"),),  # not user:hash
        ((31, "digest", "bob:"),),
        ((31, "world", "someone"),),
        ((31, "ip", "127.0.0.1/33"),),
        ((31, "ip", "1.2.3"),),
        ((0, "world", "anyone"),),
        ((64, "world", "anyone"),),  # no such permission bit
        (),
    ]


class Workload:
    def __init__(self, seed: int, root: str) -> None:
        self.rng = random.Random(seed)
        self.root = root
        self.known: dict[str, str | None] = {root: None}  # path → owning client of an ephemeral
        self.acl_of: dict[str, tuple[ACLEntry, ...]] = {root: acl_choices()[0]}  # as stored: "auth" resolved
        self.users = {client: _base_users(client) for client in CLIENTS}  # digest users, in the order added
        self.watchers: dict[str, set[str]] = {}  # path → sessions that ever set a watch on it
        self.watch_modes: dict[str, int] = {}  # path → the mode of PERSISTENT_WATCHER's watch there
        self.acls = acl_choices()
        self.client = CLIENTS[0]  # the session of the op being built
        self._kinds = list(WEIGHTS)
        self._kind_weights = list(WEIGHTS.values())

    # ----------------------------------------------------------------- choosing
    def next_op(self) -> Op:
        kind = self.rng.choices(self._kinds, self._kind_weights)[0]
        self.client = PERSISTENT_WATCHER if kind == "add_watch" else self.rng.choice(CLIENTS)
        return Op(self.client, kind, getattr(self, f"_args_{kind}")())

    def _existing(self) -> str:
        return self.rng.choice(sorted(self.known))

    def _target(self) -> str:
        """Mostly a node that exists, sometimes a name that may not."""
        if self.rng.random() < 0.8:
            return self._existing()
        return self._new_path() or self.root + "/missing"

    def _below_root(self) -> str:
        """A target other than the root, which the harness needs intact."""
        candidates = sorted(p for p in self.known if p != self.root)
        if candidates and self.rng.random() < 0.85:
            return self.rng.choice(candidates)
        return self._new_path() or self.root + "/missing"

    def _new_path(self) -> str | None:
        parent = self._existing()
        if parent.count("/") - self.root.count("/") >= DEPTH_MAX:
            return None
        return f"{parent}/{self.rng.choice(NAMES)}"

    def _version(self) -> int:
        return -1 if self.rng.random() < 0.6 else self.rng.randrange(0, 3)

    def _data(self) -> bytes:
        return self.rng.choice((b"", b"x", bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 9)))))

    def _acl(self) -> tuple[ACLEntry, ...]:
        open_acl = self.acls[0]
        return open_acl if self.rng.random() < 0.75 else self.rng.choice(self.acls)

    def _readable_target(self) -> str:
        """A target this session may read, or a missing node (read without an ACL check)."""
        path = self._target()
        if path in self.known and not self._readable(path):
            return f"{path}/missing"
        return path

    def _readable(self, path: str) -> bool:
        ids = {("digest", digest_id(user)) for user in self.users[self.client]}
        ids |= {("world", "anyone"), ("ip", "127.0.0.1")}
        return any(perms & READ and (scheme, ident) in ids for perms, scheme, ident in self.acl_of.get(path, ()))

    def _odd(self, path: str) -> str:
        """Now and then, ``path`` made odd: valid only for a sequential create, or not at all."""
        if self.rng.random() >= ODD_PATH_PROBABILITY:
            return path
        cut = path.rindex("/")
        return self.rng.choice((
            path + "/", path[:cut] + "/" + path[cut:], path + "/.", path + "/..", path + "\x01", path + "\ufff0",
            path[1:], "",
        ))  # fmt: skip

    def _create_spec(self, in_multi: bool = False) -> tuple[Any, ...]:
        """(path, data, acl, mode, ttl_ms, with_stat) of one create."""
        path = self._odd(self._new_path() or self.root + "/" + self.rng.choice(NAMES))
        modes, weights = zip(*CREATE_MODES, strict=True)
        mode = int(self.rng.choices(modes, weights)[0])
        ttl_ms = 0
        if CreateMode(mode).is_ttl:
            roll = self.rng.random()
            ttl_ms = TTL_LONG_MS if roll < 0.65 else TTL_SHORT_MS if roll < 0.95 else self.rng.choice((0, -5, 1 << 41))
        return (path, self._data(), self._acl(), mode, ttl_ms, self.rng.random() < 0.4)

    def _watch(self) -> bool:
        return self.client != PERSISTENT_WATCHER and self.rng.random() < 0.4

    # ----------------------------------------------------------------- per kind
    def _args_create(self) -> tuple[Any, ...]:
        return self._create_spec()

    def _args_delete(self) -> tuple[Any, ...]:
        return (self._odd(self._below_root()), self._version())

    def _args_set(self) -> tuple[Any, ...]:
        return (self._target(), self._data(), self._version())

    def _args_get(self) -> tuple[Any, ...]:
        return (self._target(), self._watch())

    def _args_exists(self) -> tuple[Any, ...]:
        return (self._readable_target(), self._watch())

    def _args_children(self) -> tuple[Any, ...]:
        return (self._target(), self._watch(), self.rng.random() < 0.5)

    def _unwatched_by_others(self) -> str:
        """A target no other session ever set a watch on."""
        path = self._target()
        while self.watchers.get(path, set()) - {self.client}:
            path += "/u"
        return path

    def _args_get_acl(self) -> tuple[Any, ...]:
        return (self._target(),)

    def _args_set_acl(self) -> tuple[Any, ...]:
        return (self._below_root(), self.rng.choice(self.acls), self._version())

    def _args_sync(self) -> tuple[Any, ...]:
        return (self._target(),)

    def _args_multi(self) -> tuple[Any, ...]:
        subs = []
        for _ in range(self.rng.randrange(1, 5)):
            kind = self.rng.choice(("create", "create", "delete", "set", "check"))
            if kind == "create":
                subs.append(("create", *self._create_spec(in_multi=True)))
            elif kind == "delete":
                subs.append(("delete", self._below_root(), self._version()))
            elif kind == "set":
                subs.append(("set", self._target(), self._data(), self._version()))
            else:
                subs.append(("check", self._target(), self._version()))
        return (tuple(subs), self.rng.random() < 0.5)  # (ops, send through kazoo's transaction if it can)

    def _args_multi_read(self) -> tuple[Any, ...]:
        kinds = ("get", "children")
        return (tuple((self.rng.choice(kinds), self._target()) for _ in range(self.rng.randrange(1, 4))),)

    def _args_ephemerals(self) -> tuple[Any, ...]:
        path = self._existing()
        return (self.rng.choice(("/", self.root, path, path[:-1] or "/")),)

    def _args_all_children(self) -> tuple[Any, ...]:
        return (self._target(),)

    def _args_add_watch(self) -> tuple[Any, ...]:
        path = self._readable_target()
        return (path, self.watch_modes.get(path, self.rng.choice((0, 1))))

    def _watcher_type(self) -> int:
        if self.client == PERSISTENT_WATCHER:
            return int(WatcherType.ANY)
        return int(self.rng.choice(ONE_SHOT_TYPES))

    def _args_remove_watches(self) -> tuple[Any, ...]:
        return (self._target(), self._watcher_type())

    def _args_check_watches(self) -> tuple[Any, ...]:
        return (self._unwatched_by_others(), self._watcher_type())

    def _args_who_am_i(self) -> tuple[Any, ...]:
        return ()

    def _args_reopen(self) -> tuple[Any, ...]:
        return ()

    def _args_add_auth(self) -> tuple[Any, ...]:
        return (self.rng.choice(sorted(CREDENTIALS)),)

    # ----------------------------------------------------------------- learning
    def observe(self, op: Op, result: tuple[Any, ...]) -> None:  # noqa: C901 -- one branch per operation kind
        """Learn from the reference system's result which paths now exist, with which ACL."""
        if op.kind == "add_watch" or (op.kind in ("get", "exists", "children") and op.args[1]):
            self.watchers.setdefault(op.args[0], set()).add(op.client)
        if op.kind == "add_watch" and result == ("ok",):
            self.watch_modes[op.args[0]] = op.args[1]
        elif op.client == PERSISTENT_WATCHER and op.kind == "remove_watches" and result == ("ok",):
            self.watch_modes.pop(op.args[0], None)
        if op.kind == "create":
            self._observe_create(op.client, op.args, result)
        elif op.kind == "delete" and result[0] == "ok":
            self._forget(op.args[0])
        elif op.kind == "set_acl" and result[0] == "stat":
            self.acl_of[op.args[0]] = self._stored_acl(op.client, op.args[1])
        elif op.kind == "multi" and result[0] == "multi":
            for sub, sub_result in zip(op.args[0], result[1], strict=False):
                if sub[0] == "create":
                    self._observe_create(op.client, sub[1:], sub_result)
                elif sub[0] == "delete" and sub_result[0] == "ok":
                    self._forget(sub[1])
        elif op.kind == "reopen":
            self.users[op.client] = _base_users(op.client)
            if op.client == PERSISTENT_WATCHER:
                self.watch_modes.clear()
            for path in [p for p, owner in self.known.items() if owner == op.client]:
                self._forget(path)
        elif op.kind == "add_auth" and op.args[0] not in self.users[op.client]:
            self.users[op.client].append(op.args[0])
        elif result == ("error", "NoNodeError") and op.args and op.args[0] in self.known:
            self._forget(op.args[0])

    def _stored_acl(self, client: str, acl: tuple[ACLEntry, ...]) -> tuple[ACLEntry, ...]:
        """The ACL as ZooKeeper stores it: an "auth" entry becomes one per digest identity."""
        stored: list[ACLEntry] = []
        for perms, scheme, ident in acl:
            if scheme == "auth":
                stored += [(perms, "digest", digest_id(user)) for user in self.users[client]]
            else:
                stored.append((perms, scheme, ident))
        return tuple(stored)

    def _observe_create(self, client: str, spec: tuple[Any, ...], result: tuple[Any, ...]) -> None:
        mode = CreateMode(spec[3])
        if result[0] == "created":
            self.known[result[1]] = client if mode.is_ephemeral else None
            self.acl_of[result[1]] = self._stored_acl(client, spec[2])
        elif result == ("error", "NodeExistsError") and spec[0].startswith(self.root) and spec[0] == normpath(spec[0]):
            self.known.setdefault(spec[0], None)  # its ACL unknown: not readable, as far as we know

    def _forget(self, path: str) -> None:
        if path != self.root:
            self.known.pop(path, None)
            self.acl_of.pop(path, None)


def _base_users(client: str) -> list[str]:
    user = CLIENT_USER[client]
    return [] if user is None else [user]
