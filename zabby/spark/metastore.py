"""The metadata store on a SyncClient: Kylin 5's UnitOfWork as one zabby multi.

``commit`` runs the MVCC loop: read the documents (recording their versions), plan the ops
(pure, ``model.plan_*``), prepend the epoch ``check``, send one multi.  The multi succeeds
as a whole or not at all.  On BadVersion (another writer got in between, or we read from a
follower that was behind) it syncs, re-reads and re-plans, at most ``max_attempts`` times.
A failed epoch check raises FencedError and is never retried.  On ConnectionLoss the
outcome is unknown: the new segment's node (a fresh uuid) tells whether the multi was
applied, so a retry never applies a build twice.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import socket
import time
from collections.abc import Callable
from typing import Any

from zabby.client.retry import KazooRetry
from zabby.errors import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
)

from .epoch import FencedError, ProjectEpoch
from .model import (
    AuditEntry,
    CubeDesc,
    CubeInstance,
    CubeState,
    CubeStatistics,
    Layout,
    ModelDesc,
    Op,
    ProjectDesc,
    Segment,
    Versioned,
    new_uuid,
    plan_build,
    plan_create_project,
    plan_merge,
)

# ConnectionLoss during a failover is retried; an expired session is not (it means fenced)
_READ_RETRY = KazooRetry(max_tries=20, delay=0.05, max_delay=1.0, ignore_expire=False)
log = logging.getLogger("zabby.spark.metastore")


class MetaStoreError(RuntimeError):
    """A metadata transaction failed for a reason a retry cannot fix."""


class ConflictError(MetaStoreError):
    """Still conflicting (BadVersion) after the allowed attempts."""


@dataclasses.dataclass
class CommitResult:
    zxid: int  # the zxid of the multi (every node it wrote carries it)
    attempts: int
    t_sent: float  # wall-clock time the successful attempt was sent
    t_acked: float  # wall-clock time its reply arrived
    audit_path: str = ""
    recovered: bool = False  # the reply was lost; the commit was found applied

    @property
    def seconds(self) -> float:
        return self.t_acked - self.t_sent


class MetaStore:
    """Reads and atomic, fenced, MVCC writes of one project's metadata."""

    def __init__(self, client: Any, layout: Layout, epoch: ProjectEpoch | None, *, operator: str = "",
                 max_attempts: int = 8, before_commit: Callable[[list[Op], int], None] | None = None) -> None:  # fmt: skip
        self.client = client
        self.layout = layout
        self.epoch = epoch
        self.operator = operator or (epoch.owner if epoch else socket.gethostname())
        self.max_attempts = max_attempts
        self.before_commit = before_commit  # test hook: called with the ops and the attempt number

    # -- reads ----------------------------------------------------------------------------
    def _get(self, path: str, cls: Any) -> Versioned:
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return Versioned(None, -1, 0)
        return Versioned(cls.from_json(data) if data else None, stat.version, stat.mzxid)

    def read_cube(self, cube: str) -> Versioned:
        return self._get(self.layout.cube(cube), CubeInstance)

    def read_desc(self, cube: str) -> CubeDesc | None:
        return self._get(self.layout.cube_desc(cube), CubeDesc).doc

    def read_model(self, name: str) -> ModelDesc | None:
        return self._get(self.layout.model(name), ModelDesc).doc

    def read_project(self) -> ProjectDesc | None:
        return self._get(self.layout.project_path, ProjectDesc).doc

    def read_state(self, cube: str) -> CubeState:
        state = CubeState(self.read_cube(cube), self._get(self.layout.statistics(cube), CubeStatistics))
        try:
            ids = self.client.get_children(self.layout.segments(cube))
        except NoNodeError:
            ids = []
        for seg_id in ids:
            v = self._get(self.layout.segment(cube, seg_id), Segment)
            if v.doc is not None:
                state.segments[seg_id] = v
        return state

    def read_segment(self, cube: str, seg_id: str) -> tuple[Segment, Any] | None:
        try:
            data, stat = self.client.get(self.layout.segment(cube, seg_id))
        except NoNodeError:
            return None
        return Segment.from_json(data), stat

    def audit_trail(self) -> list[tuple[str, AuditEntry, Any]]:
        out = []
        try:
            names = sorted(self.client.get_children(self.layout.audit))
        except NoNodeError:
            return []
        for name in names:
            try:
                data, stat = self.client.get(f"{self.layout.audit}/{name}")
            except NoNodeError:
                continue
            out.append((name, AuditEntry.from_json(data), stat))
        return out

    # -- writes ---------------------------------------------------------------------------
    def init_project(self, project: ProjectDesc, model: ModelDesc, desc: CubeDesc, storage_location: str = "") -> CommitResult:
        """Create (or update) project, model and cube descriptor, and an empty cube instance."""
        desc.validate()
        for path in self.layout.containers():
            self.client.ensure_path(path)

        def plan(_: Any) -> list[Op]:
            existing = {}
            paths = [self.layout.project_path, self.layout.model(model.name), self.layout.cube_desc(desc.name),
                     self.layout.cube(desc.name), self.layout.segments(desc.name)]  # fmt: skip
            for path in paths:
                stat = self.client.exists(path)
                if stat is not None:
                    existing[path] = stat.version
            cube = CubeInstance(name=desc.name, descriptor=desc.name, storage_location=storage_location)
            audit = self._audit("CREATE_PROJECT", f"project {project.name}: model {model.name}, cube {desc.name} declared")
            return plan_create_project(self.layout, project, model, desc, cube, audit, self._epoch_op(), existing)

        return self._commit(plan, read=lambda: None, marker=None)

    def add_segment(self, cube: str, segment: Segment, job_id: str = "") -> CommitResult:
        """One multi: the segment node, the cube instance's segment list, statistics, audit."""
        msg = (f"BUILD {cube} segment {segment.name} ({segment.date_range_start}..{segment.date_range_end}): "
               f"{segment.input_records:,} input rows -> {segment.row_count:,} rows in {segment.cuboid_count} cuboids, "
               f"{segment.size_bytes / 1e6:.1f} MB, Spark {segment.build_seconds:.1f}s")  # fmt: skip

        def plan(state: CubeState) -> list[Op]:
            return plan_build(self.layout, state, segment, self._audit("BUILD", msg, job_id), self._epoch_op())

        return self._commit(plan, read=lambda: self.read_state(cube), marker=self.layout.segment(cube, segment.uuid))

    def merge_segments(self, cube: str, merged: Segment, job_id: str = "") -> CommitResult:
        """One multi: create the merged segment, delete its sources, update cube + statistics."""
        msg = (f"MERGE {cube} {len(merged.merged_from)} segments -> {merged.name}: {merged.row_count:,} rows, "
               f"{merged.size_bytes / 1e6:.1f} MB, Spark {merged.build_seconds:.1f}s")  # fmt: skip

        def plan(state: CubeState) -> list[Op]:
            return plan_merge(self.layout, state, merged, self._audit("MERGE", msg, job_id), self._epoch_op())

        return self._commit(plan, read=lambda: self.read_state(cube), marker=self.layout.segment(cube, merged.uuid))

    # -- the loop -------------------------------------------------------------------------
    def _epoch_op(self) -> Op | None:
        return self.epoch.check_op() if self.epoch is not None else None

    def _audit(self, action: str, message: str, unit_id: str = "") -> AuditEntry:
        token = self.epoch.token if self.epoch is not None else 0
        return AuditEntry(unit_id=unit_id or new_uuid(), action=action, message=message, operator=self.operator,
                          instance=socket.gethostname(), epoch_token=token)  # fmt: skip

    def _commit(self, plan: Callable[[Any], list[Op]], read: Callable[[], Any], marker: str | None) -> CommitResult:
        try:
            return self._commit_loop(plan, read, marker)
        except SessionExpiredError as exc:  # the session (and with it the epoch node) is gone
            raise FencedError(f"session expired: no longer the epoch owner of {self.layout.project}") from exc

    def _commit_loop(self, plan: Callable[[Any], list[Op]], read: Callable[[], Any], marker: str | None) -> CommitResult:
        delay = 0.02
        for attempt in range(1, self.max_attempts + 1):
            # reads are idempotent: ride out a failover (ConnectionLoss) with the client's retry;
            # PlanError propagates: the change does not apply
            ops = plan(_READ_RETRY.copy()(read))
            if self.before_commit is not None:
                self.before_commit(ops, attempt)
            t_sent = time.time()
            try:
                results = self._send(ops)
            except ConnectionLoss:
                found = self._find_marker(marker)
                if found is not None:
                    return CommitResult(found, attempt, t_sent, time.time(), recovered=True)
                log.warning("metadata commit: connection lost (attempt %d); re-reading", attempt)
                continue
            t_acked = time.time()
            failed = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failed:
                return CommitResult(self._zxid(ops, results), attempt, t_sent, t_acked, self._audit_path(results))
            index, error = failed[0]
            op = ops[index]
            if op.kind == "check" and self.epoch is not None and op.path.startswith(self.layout.epoch + "/"):
                raise FencedError(f"epoch check failed on {op.path} ({type(error).__name__}): fenced out of {self.layout.project}")
            if marker is not None and op.path == marker and isinstance(error, NodeExistsError):
                found = self._find_marker(marker)
                if found is not None:  # applied by an attempt whose reply was lost
                    return CommitResult(found, attempt, t_sent, t_acked, recovered=True)
            if isinstance(error, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)):
                log.info("metadata commit: %s on %s (attempt %d); re-reading", type(error).__name__, op.path, attempt)
                try:
                    self.client.sync(self.layout.base)  # our server may be behind the writer that won
                except Exception:
                    pass
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
                continue
            raise MetaStoreError(f"metadata commit failed: {type(error).__name__} on {op.kind} {op.path}")
        raise ConflictError(f"metadata commit still conflicting after {self.max_attempts} attempts")

    def _send(self, ops: list[Op]) -> list[Any]:
        tx = self.client.transaction()
        for op in ops:
            if op.kind == "create":
                tx.create(op.path, op.data, sequence=op.sequence)
            elif op.kind == "set":
                tx.set_data(op.path, op.data, op.version)
            elif op.kind == "delete":
                tx.delete(op.path, op.version)
            elif op.kind == "check":
                tx.check(op.path, op.version)
            else:  # pragma: no cover - model only makes the four kinds
                raise ValueError(op.kind)
        return tx.commit()

    def _find_marker(self, marker: str | None) -> int | None:
        if marker is None:
            return None
        for _ in range(50):
            try:
                stat = self.client.exists(marker)
                return None if stat is None else int(stat.czxid)
            except ConnectionLoss:
                time.sleep(0.1)
        return None

    def _zxid(self, ops: list[Op], results: list[Any]) -> int:
        for op, r in zip(ops, results, strict=False):
            if op.kind == "set" and hasattr(r, "mzxid"):
                return int(r.mzxid)
        for op in ops:  # only creates: read one back
            if op.kind == "create" and not op.sequence:
                stat = self.client.exists(op.path)
                if stat is not None:
                    return int(stat.czxid)
        return 0

    @staticmethod
    def _audit_path(results: list[Any]) -> str:
        paths = [r for r in results if isinstance(r, str) and "/audit/entry-" in r]
        return paths[-1] if paths else ""
