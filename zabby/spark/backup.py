"""Kylin-style metadata backup: a project's subtree ``<root>/<project>`` as a folder of JSON
files, one per znode, plus a manifest with the zxid the backup is consistent at; and its
restore into any ensemble, under the project's epoch.

Layout of a backup::

    manifest.json                  format, project, root, zxid, znode count, sha256 of each file
    znodes/@node.json              the project node itself
    znodes/<name>/@node.json       each znode below it, one folder per path component
                                   (names percent-encoded, so none can be "@node.json")
    a node file := {"path", "data", "encoding": "utf-8"|"base64", "stat": {...}}

Theory of operation:

- *A consistent cut without stopping the writer.*  The backup syncs, takes the server's zxid
  ``Z`` (the reply's), then reads the subtree.  Every change to a znode raises its mzxid (data)
  or its parent's pzxid (children), so if no node read has an mzxid or pzxid above ``Z``,
  nothing changed since ``Z`` and the files are the tree exactly at ``Z``.  Otherwise (a build
  committed meanwhile) it reads again, a bounded number of times.  Ephemeral nodes (the epoch's
  lock nodes) belong to sessions, not to the metadata: they are left out.
- *Restore respects fencing.*  Restore first takes the target project's epoch like any writer
  (``ProjectEpoch``), so it waits for, or refuses, a driver that owns the project; every multi
  it sends starts with the epoch ``check``, so a restore whose session is lost mid-way is
  fenced out instead of writing on.  Documents are written parents first and the cube
  instances (readers' source of truth for "which segments are ready") last, so a query node
  never sees a cube that names segments not yet written.  Sequential children (audit
  entries) keep their names, and their parent's counter is moved past the highest one, so the
  next audit entry cannot collide with a restored one.  Znode versions and zxids start anew in
  the target (a client cannot set them); the data of every node is read back and compared.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zabby.errors import NoNodeError, RolledBackError
from zabby.opcodes import is_session_owner

from .epoch import FencedError, ProjectEpoch
from .model import Layout

FORMAT = "zabby-kylin-metadata-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
NODES_DIR = "znodes"
NODE_FILE = "@node.json"
READ_ATTEMPTS_MAX = 8
MULTI_OPS_MAX = 200
MULTI_BYTES_MAX = 256 * 1024  # well below jute.maxbuffer (1 MiB)
_SEQUENTIAL = re.compile(r".*?(\d{10})$")
_STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion", "ephemeralOwner",
                "dataLength", "numChildren", "pzxid")  # fmt: skip

Nodes = dict[str, tuple[bytes, Any]]  # path relative to the project node ("" is the node) -> (data, stat)


class BackupError(RuntimeError):
    """A backup or restore could not be done; the message says why."""


@dataclass(frozen=True, slots=True)
class Manifest:
    project: str
    root: str
    zxid: int
    znodes: int
    data_bytes: int
    created: str
    files: dict[str, str]  # node file (relative to the backup) -> sha256

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "project": self.project, "root": self.root,
                           "zxid": f"0x{self.zxid:x}", "znodes": self.znodes, "data_bytes": self.data_bytes,
                           "created": self.created, "files": self.files}, indent=1)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RestoreReport:
    project: str
    znodes: int
    zxid: int  # of the backup
    seconds: float


# ----------------------------------------------------------------------------- reading
def _rel(base: str, path: str) -> str:
    return "" if path == base else path[len(base) + 1 :]


def _read_layer(client: Any, base: str, layer: list[str], nodes: Nodes) -> list[str] | None:
    """Read one layer (pipelined); its children's paths, or None if a node vanished."""
    gets = [(path, client.get_async(path), client.get_children_async(path)) for path in layer]
    children = []
    for path, data_pending, children_pending in gets:
        try:
            data, stat = data_pending.get(timeout=30)
            names = children_pending.get(timeout=30)
        except NoNodeError:
            return None  # deleted while we read: the cut is not consistent
        if is_session_owner(stat.ephemeralOwner):
            continue  # a session's node (the epoch locks), not metadata
        nodes[_rel(base, path)] = (data, stat)
        children += [f"{path}/{name}" for name in names]
    return children


def _read_all(client: Any, base: str) -> Nodes | None:
    nodes: Nodes = {}
    layer: list[str] | None = [base]
    while layer:
        layer = _read_layer(client, base, layer, nodes)
        if layer is None:
            return None
    return nodes


def _walk(client: Any, base: str, zxid: int) -> Nodes | None:
    """The subtree, or None if it changed after ``zxid`` while it was read."""
    nodes = _read_all(client, base)
    if nodes is None or any(max(stat.mzxid, stat.pzxid) > zxid for _, stat in nodes.values()):
        return None
    return nodes


def project_data(client: Any, base: str) -> dict[str, bytes]:
    """The data of every persistent node under ``base`` (relative path -> bytes); empty if
    ``base`` does not exist.  Not a consistent cut: for checks once writers are done."""
    if client.exists(base) is None:
        return {}
    nodes = _read_all(client, base)
    if nodes is None:
        raise BackupError(f"{base} changed while it was read (is a driver writing?)")
    return {rel: data for rel, (data, _) in nodes.items()}


def read_consistent(client: Any, base: str) -> tuple[int, Nodes]:
    """``(Z, nodes)``: the subtree exactly as it was at zxid ``Z`` (see the module doc)."""
    if client.exists(base) is None:
        raise BackupError(f"{base} does not exist in this ensemble")
    for _ in range(READ_ATTEMPTS_MAX):
        client.sync(base)
        zxid = client.last_zxid
        nodes = _walk(client, base, zxid)
        if nodes is not None:
            return zxid, nodes
    raise BackupError(f"{base} kept changing during {READ_ATTEMPTS_MAX} reads: retry when the project's writer is quieter")


# ----------------------------------------------------------------------------- files
def node_file(rel: str) -> str:
    """The file of a node, relative to the backup folder."""
    parts = [urllib.parse.quote(name, safe="") for name in rel.split("/")] if rel else []
    return "/".join([NODES_DIR, *parts, NODE_FILE])


def _node_json(path: str, data: bytes, stat: Any) -> bytes:
    try:
        text, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(data).decode("ascii"), "base64"
    fields = {"path": path, "data": text, "encoding": encoding, "stat": dict(zip(_STAT_FIELDS, stat, strict=True))}
    return json.dumps(fields, indent=1).encode()


def backup_project(client: Any, layout: Layout, out_dir: Path) -> Manifest:
    """Write ``layout.base`` into ``out_dir`` (which must not exist or be empty)."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise BackupError(f"{out_dir} is not empty")
    zxid, nodes = read_consistent(client, layout.base)
    files = {}
    for rel, (data, stat) in sorted(nodes.items()):
        name = node_file(rel)
        content = _node_json(f"{layout.base}/{rel}" if rel else layout.base, data, stat)
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_bytes(content)
        files[name] = hashlib.sha256(content).hexdigest()
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    manifest = Manifest(layout.project, layout.root, zxid, len(nodes), sum(len(d) for d, _ in nodes.values()), created, files)
    (out_dir / MANIFEST).write_text(manifest.to_json())
    return manifest


def load_backup(backup_dir: Path) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest and every node's data (relative path -> bytes), each file checked.

    Raises:
        BackupError: no manifest, a foreign format, a missing file or a checksum mismatch.
    """
    manifest, docs, _ = _load_nodes(backup_dir)
    return manifest, docs


def _load_nodes(backup_dir: Path) -> tuple[Manifest, dict[str, bytes], dict[str, int]]:
    """``load_backup``, and each node's cversion when it was backed up (relative path -> int)."""
    try:
        raw = json.loads((backup_dir / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{backup_dir}: no {MANIFEST} (not a metadata backup)") from None
    except ValueError as exc:
        raise BackupError(f"{backup_dir / MANIFEST}: not JSON ({exc})") from None
    if raw.get("format") != FORMAT or raw.get("version") != FORMAT_VERSION:
        raise BackupError(f"{backup_dir / MANIFEST}: not a {FORMAT} v{FORMAT_VERSION} manifest")
    manifest = Manifest(raw["project"], raw["root"], int(raw["zxid"], 16), raw["znodes"], raw["data_bytes"], raw["created"], raw["files"])
    docs, cversions = {}, {}
    base = f"{manifest.root.rstrip('/')}/{manifest.project}"
    for name, digest in manifest.files.items():
        try:
            content = (backup_dir / name).read_bytes()
        except FileNotFoundError:
            raise BackupError(f"{backup_dir}: {name} is listed in the manifest but missing") from None
        if hashlib.sha256(content).hexdigest() != digest:
            raise BackupError(f"{backup_dir / name}: checksum mismatch (the file changed after the backup)")
        try:
            node = json.loads(content)
            data = node["data"].encode() if node["encoding"] == "utf-8" else base64.b64decode(node["data"])
            cversion = int(node["stat"]["cversion"])  # the restore's bound on sequence suffixes
            rel = _rel(base, node["path"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # binascii.Error is a ValueError
            raise BackupError(f"{backup_dir / name}: not a node file ({type(exc).__name__}: {exc})") from None
        docs[rel], cversions[rel] = data, cversion
    return manifest, docs, cversions


# ----------------------------------------------------------------------------- restore
def _depth_order(rel: str) -> tuple[bool, int, str]:
    """Parents first; the cube instances last (see the module doc)."""
    return (rel == "cube" or rel.startswith("cube/"), rel.count("/") + bool(rel), rel)


def _batches(ops: list[tuple[str, str, bytes]]) -> list[list[tuple[str, str, bytes]]]:
    batches: list[list[tuple[str, str, bytes]]] = [[]]
    size = 0
    for op in ops:
        if batches[-1] and (len(batches[-1]) >= MULTI_OPS_MAX or size + len(op[2]) > MULTI_BYTES_MAX):
            batches.append([])
            size = 0
        batches[-1].append(op)
        size += len(op[2]) + len(op[1])
    return [batch for batch in batches if batch]


def _commit(client: Any, epoch: ProjectEpoch, batch: list[tuple[str, str, bytes]]) -> None:
    """One multi: the epoch check, then the batch.

    Raises:
        FencedError: the epoch check failed (our epoch node is gone).
        BackupError: another op failed (nothing of the batch was applied).
    """
    tx = client.transaction()
    check = epoch.check_op()
    tx.check(check.path, check.version)
    for kind, path, data in batch:
        if kind == "create":
            tx.create(path, data)
        elif kind == "set":
            tx.set_data(path, data, -1)
        else:
            tx.delete(path, -1)
    results = tx.commit()
    failed = [(index, r) for index, r in enumerate(results) if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
    if not failed:
        return
    index, error = failed[0]
    if index == 0:
        raise FencedError(f"epoch check failed ({type(error).__name__}): fenced out of {epoch.layout.project}")
    kind, path, _ = batch[index - 1]
    raise BackupError(f"restore: {kind} {path} failed: {type(error).__name__}")


def _keep(rel: str) -> bool:
    """The nodes restore never deletes: the project node and its epoch (held by us now)."""
    return rel in ("", "epoch") or rel.startswith("epoch/")


def _clear_target(client: Any, epoch: ProjectEpoch, existing: set[str], replace: bool) -> set[str]:
    """Delete what is there (``replace``), or refuse if there is metadata; what is left."""
    doomed = sorted((rel for rel in existing if not _keep(rel)), key=lambda r: (-r.count("/"), r))
    if doomed and not replace:
        raise BackupError(f"project {epoch.layout.project} already has {len(doomed)} metadata znodes here: "
                          "restore into a new project, or pass replace to overwrite them")  # fmt: skip
    base = epoch.layout.base
    for batch in _batches([("delete", f"{base}/{rel}", b"") for rel in doomed]):
        _commit(client, epoch, batch)
    return existing - set(doomed)


def _advance_sequences(client: Any, epoch: ProjectEpoch, base: str, docs: dict[str, bytes], cversions: dict[str, int]) -> None:
    """Move each parent's sequence counter (its cversion) past its highest restored suffix.

    A name that merely ends in ten digits (a segment's UUID can) is no suffix: a sequential
    child's suffix is the parent's cversion before its create, so it is below the parent's
    backed-up cversion.  Without that bound, such a name asked for billions of fillers."""
    highest: dict[str, int] = {}
    for rel in docs:
        match = _SEQUENTIAL.fullmatch(rel.rsplit("/", 1)[-1])
        if match and "/" in rel:
            parent = rel.rsplit("/", 1)[0]
            suffix = int(match.group(1))
            if suffix < cversions.get(parent, 0):
                highest[parent] = max(highest.get(parent, -1), suffix)
    for parent, top in highest.items():
        path = f"{base}/{parent}"
        needed = top + 1 - client.exists(path).cversion  # each create moves it by one
        filler = f"{path}/zabby-restore-filler"
        ops = [op for _ in range(max(0, needed)) for op in (("create", filler, b""), ("delete", filler, b""))]
        for batch in _batches(ops):
            _commit(client, epoch, batch)


def _verify(client: Any, layout: Layout, docs: dict[str, bytes]) -> None:
    got = project_data(client, layout.base)
    got = {rel: data for rel, data in got.items() if not _keep(rel) or rel in docs}
    wanted = {rel: data for rel, data in docs.items() if not _keep(rel) or rel in got}
    if got != wanted:
        differing = sorted(set(got) ^ set(wanted) | {r for r in set(got) & set(wanted) if got[r] != wanted[r]})
        raise BackupError(f"restored {layout.base} differs from the backup at {differing[:5]}")


def restore_project(client: Any, backup_dir: Path, layout: Layout | None = None, *, replace: bool = False,
                    owner: str | None = None, epoch_timeout_s: float = 30.0) -> RestoreReport:  # fmt: skip
    """Write a backup into ``layout`` (default: the backup's own project and root).

    Raises:
        BackupError: a damaged backup, metadata already there (without ``replace``), a failed op.
        EpochTaken: another driver owns the project's epoch.
        FencedError: our epoch was lost during the restore.
    """
    started = time.monotonic()
    manifest, docs, cversions = _load_nodes(backup_dir)
    layout = layout or Layout(manifest.project, manifest.root)
    epoch = ProjectEpoch(client, layout, owner=owner or "zabby-restore")
    epoch.acquire(timeout=epoch_timeout_s)
    try:
        present = _clear_target(client, epoch, set(project_data(client, layout.base)), replace)
        ops = [("set" if rel in present else "create", f"{layout.base}/{rel}" if rel else layout.base, docs[rel])
               for rel in sorted(docs, key=_depth_order)]  # fmt: skip
        for batch in _batches(ops):
            _commit(client, epoch, batch)
        _advance_sequences(client, epoch, layout.base, docs, cversions)
        _verify(client, layout, docs)
    finally:
        epoch.release()
    return RestoreReport(layout.project, len(docs), manifest.zxid, time.monotonic() - started)
