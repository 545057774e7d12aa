"""The Kylin-style metadata model kept in zabby: pure dataclasses <-> JSON, the znode layout,
and the multi ops of a build or a merge (no I/O, no Spark: everything here is testable alone).

Layout under ``<root>/<project>`` (``root`` defaults to ``/kylin``)::

    project                      ProjectDesc      (JSON)
    model/<name>                 ModelDesc
    cube_desc/<name>             CubeDesc         (dimensions, measures, aggregation groups)
    cube/<name>                  CubeInstance     (status + the list of ready segments)
    cube_statistics/<name>       CubeStatistics   (totals and rows per cuboid)
    segment/<cube>/<id>          Segment          (one per built or merged segment)
    audit/entry-<seq>            AuditEntry       (persistent sequential: the human-readable trail)
    epoch/<uuid>__lock__<seq>    the project epoch (ephemeral sequential; czxid = fencing token)

Every change that touches several entities is ONE multi: a ``check`` on the writer's epoch
node, ``set_data`` with the expected version on every document read (Kylin 5's MVCC),
``create``/``delete`` for segment nodes and a sequential ``create`` of the audit entry.  The
cube instance's segment list is the source of truth for readers ("which segments are
ready"), so a reader that looks at one node sees either the old or the new build, never half.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import time
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, TypeVar

T = TypeVar("T", bound="Doc")

DEFAULT_ROOT = "/kylin"
SEGMENT_READY = "READY"
CUBE_READY = "READY"
CUBE_NEW = "NEW"


def now_ms() -> int:
    return int(time.time() * 1000)


def new_uuid() -> str:
    return str(uuidlib.uuid4())


# -- documents ---------------------------------------------------------------------------
@dataclasses.dataclass
class Doc:
    """A JSON document stored in one znode; unknown keys are kept (forward compatibility)."""

    extra: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True)

    _nested: ClassVar[dict[str, Any]] = {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if isinstance(value, Doc):
                value = value.to_dict()
            elif isinstance(value, list):
                value = [v.to_dict() if isinstance(v, Doc) else v for v in value]
            out[f.name] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls: type[T], raw: dict[str, Any]) -> T:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in names:
                extra[key] = value
                continue
            nested = cls._nested.get(key)
            if nested is not None and isinstance(value, list):
                value = [nested.from_dict(v) for v in value]
            elif nested is not None and isinstance(value, dict):
                value = nested.from_dict(value)
            kwargs[key] = value
        return cls(**kwargs, extra=extra)

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls: type[T], data: bytes) -> T:
        return cls.from_dict(json.loads(data.decode("utf-8")))


@dataclasses.dataclass
class ProjectDesc(Doc):
    name: str
    uuid: str = dataclasses.field(default_factory=new_uuid)
    description: str = ""
    owner: str = "zabby"
    status: str = "ENABLED"
    models: list[str] = dataclasses.field(default_factory=list)
    realizations: list[dict[str, str]] = dataclasses.field(default_factory=list)  # {name, type: CUBE, realization}
    tables: list[str] = dataclasses.field(default_factory=list)
    override_kylin_properties: dict[str, str] = dataclasses.field(default_factory=dict)
    create_time_utc: int = dataclasses.field(default_factory=now_ms)
    last_modified: int = dataclasses.field(default_factory=now_ms)


@dataclasses.dataclass
class ModelDesc(Doc):
    name: str
    fact_table: str
    dimensions: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # [{table, columns}]
    metrics: list[str] = dataclasses.field(default_factory=list)
    computed_columns: list[dict[str, str]] = dataclasses.field(default_factory=list)  # {columnName, expression, datatype}
    partition_desc: dict[str, Any] = dataclasses.field(default_factory=dict)  # {partition_date_column, partition_type}
    filter_condition: str = ""
    uuid: str = dataclasses.field(default_factory=new_uuid)
    owner: str = "zabby"
    last_modified: int = dataclasses.field(default_factory=now_ms)

    @property
    def partition_column(self) -> str:
        return str(self.partition_desc.get("partition_date_column", "sale_date"))


@dataclasses.dataclass
class CubeDesc(Doc):
    name: str
    model_name: str
    dimensions: list[dict[str, Any]]  # [{name, table, column}]
    measures: list[dict[str, Any]]  # [{name, function: {expression, parameter: {type, value}, returntype}}]
    aggregation_groups: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    description: str = ""
    uuid: str = dataclasses.field(default_factory=new_uuid)
    engine_type: int = 4  # Spark, as in Kylin 4
    storage_type: int = 4  # Parquet
    auto_merge_time_ranges: list[int] = dataclasses.field(default_factory=list)
    last_modified: int = dataclasses.field(default_factory=now_ms)

    @property
    def dimension_columns(self) -> list[str]:
        return [str(d["column"]) for d in self.dimensions]

    def cuboids(self) -> list[tuple[str, ...]]:
        """The cuboids (dimension column sets) this descriptor asks for, base cuboid first."""
        return enumerate_cuboids(self.dimension_columns, self.aggregation_groups)

    def cuboid_id(self, columns: Iterable[str]) -> int:
        """Kylin's cuboid id: a bit per dimension, the first dimension the highest bit."""
        dims = self.dimension_columns
        wanted = set(columns)
        return sum(1 << (len(dims) - 1 - i) for i, d in enumerate(dims) if d in wanted)

    def validate(self) -> None:
        if not self.dimensions:
            raise ValueError(f"cube {self.name}: no dimensions")
        names = [m["name"] for m in self.measures]
        if len(set(names)) != len(names):
            raise ValueError(f"cube {self.name}: duplicate measure names")
        for m in self.measures:
            fn = m["function"]["expression"].upper()
            if fn not in ("COUNT", "SUM", "MIN", "MAX", "COUNT_DISTINCT"):
                raise ValueError(f"cube {self.name}: measure {m['name']}: unsupported function {fn}")
        dims = set(self.dimension_columns)
        for group in self.aggregation_groups:
            unknown = set(group.get("includes", [])) - dims
            if unknown:
                raise ValueError(f"cube {self.name}: aggregation group names unknown dimensions {sorted(unknown)}")


def enumerate_cuboids(dimensions: Sequence[str], groups: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Kylin's aggregation-group pruning: mandatory dims always in, a hierarchy only as a prefix
    (country needs region), joint dims all-or-none, the rest free; union of the groups plus the
    base cuboid.  No group means the full cube (2^n cuboids)."""
    order = {d: i for i, d in enumerate(dimensions)}
    found: set[frozenset[str]] = {frozenset(dimensions)}
    for group in groups or [{"includes": list(dimensions)}]:
        includes = list(group.get("includes", dimensions))
        rule = group.get("select_rule", {}) or {}
        mandatory = [d for d in rule.get("mandatory_dims", []) if d in includes]
        hierarchies = [[d for d in h if d in includes] for h in rule.get("hierarchy_dims", [])]
        joints = [[d for d in j if d in includes] for j in rule.get("joint_dims", [])]
        used = set(mandatory) | {d for h in hierarchies for d in h} | {d for j in joints for d in j}
        choices: list[list[tuple[str, ...]]] = [[tuple(mandatory)]]
        for h in hierarchies:
            choices.append([tuple(h[:k]) for k in range(len(h) + 1)])
        for j in joints:
            choices.append([(), tuple(j)])
        for d in includes:
            if d not in used:
                choices.append([(), (d,)])
        for combo in itertools.product(*choices):
            found.add(frozenset(d for part in combo for d in part))
    cuboids = [tuple(sorted(c, key=order.__getitem__)) for c in found]
    cuboids.sort(key=lambda c: (-len(c), [order[d] for d in c]))
    return cuboids


@dataclasses.dataclass
class Segment(Doc):
    """One built (or merged) segment: a date range of the cube, stored as Parquet."""

    uuid: str
    name: str  # yyyyMMddHHmmss_yyyyMMddHHmmss, as Kylin names time-partitioned segments
    date_range_start: str  # ISO date, inclusive
    date_range_end: str  # ISO date, exclusive
    status: str = SEGMENT_READY
    input_records: int = 0
    row_count: int = 0  # rows of all cuboids
    cuboid_count: int = 0
    size_bytes: int = 0
    storage_path: str = ""
    build_seconds: float = 0.0
    last_build_time: int = dataclasses.field(default_factory=now_ms)
    last_build_job_id: str = ""
    merged_from: list[str] = dataclasses.field(default_factory=list)
    cuboid_rows: dict[str, int] = dataclasses.field(default_factory=dict)  # cuboid id -> rows
    create_time_utc: int = dataclasses.field(default_factory=now_ms)

    def ref(self) -> SegmentRef:
        return SegmentRef(
            id=self.uuid, name=self.name, date_range_start=self.date_range_start, date_range_end=self.date_range_end,
            status=self.status, row_count=self.row_count, cuboid_count=self.cuboid_count, size_bytes=self.size_bytes,
            storage_path=self.storage_path, build_seconds=self.build_seconds, last_build_time=self.last_build_time,
            input_records=self.input_records,
        )  # fmt: skip


@dataclasses.dataclass
class SegmentRef(Doc):
    """A segment as listed in the cube instance (what a query node needs to route queries)."""

    id: str
    name: str
    date_range_start: str
    date_range_end: str
    status: str = SEGMENT_READY
    row_count: int = 0
    cuboid_count: int = 0
    size_bytes: int = 0
    storage_path: str = ""
    build_seconds: float = 0.0
    last_build_time: int = 0
    input_records: int = 0


@dataclasses.dataclass
class CubeInstance(Doc):
    name: str
    descriptor: str
    uuid: str = dataclasses.field(default_factory=new_uuid)
    status: str = CUBE_NEW
    owner: str = "zabby"
    segments: list[SegmentRef] = dataclasses.field(default_factory=list)
    storage_location: str = ""
    base_zxid: int = 0  # mzxid of the version this one was derived from (the MVCC read point)
    create_time_utc: int = dataclasses.field(default_factory=now_ms)
    last_modified: int = dataclasses.field(default_factory=now_ms)
    version: str = "zabby-1"

    _nested: ClassVar[dict[str, Any]] = {"segments": SegmentRef}

    def ready_segments(self) -> list[SegmentRef]:
        return [s for s in self.segments if s.status == SEGMENT_READY]


@dataclasses.dataclass
class CubeStatistics(Doc):
    cube: str
    segment_count: int = 0
    total_rows: int = 0
    total_input_records: int = 0
    total_size_bytes: int = 0
    cuboid_rows: dict[str, int] = dataclasses.field(default_factory=dict)  # over all ready segments
    last_build_job_id: str = ""
    last_modified: int = dataclasses.field(default_factory=now_ms)


@dataclasses.dataclass
class AuditEntry(Doc):
    """One committed unit of work (Kylin 5's audit log row group), with a readable message."""

    unit_id: str
    action: str  # CREATE_PROJECT | BUILD | MERGE
    message: str
    operator: str = ""
    instance: str = ""
    ts: int = dataclasses.field(default_factory=now_ms)
    epoch_token: int = 0  # czxid of the writer's epoch node (its fencing token)
    keys: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # [{meta_key, mvcc}] (new versions)


# -- ranges ------------------------------------------------------------------------------
def segment_name(start: str, end: str) -> str:
    fmt = "%Y%m%d%H%M%S"
    return dt.datetime.fromisoformat(start).strftime(fmt) + "_" + dt.datetime.fromisoformat(end).strftime(fmt)


def overlaps(a_start: str, a_end: str, b_start: str, b_end: str) -> bool:
    return a_start < b_end and b_start < a_end


# -- layout ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layout:
    project: str
    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        if not self.project or "/" in self.project:
            raise ValueError(f"bad project name {self.project!r}")

    @property
    def base(self) -> str:
        return f"{self.root.rstrip('/')}/{self.project}"

    @property
    def project_path(self) -> str:
        return f"{self.base}/project"

    def model(self, name: str) -> str:
        return f"{self.base}/model/{name}"

    def cube_desc(self, name: str) -> str:
        return f"{self.base}/cube_desc/{name}"

    def cube(self, name: str) -> str:
        return f"{self.base}/cube/{name}"

    def statistics(self, name: str) -> str:
        return f"{self.base}/cube_statistics/{name}"

    def segments(self, cube: str) -> str:
        return f"{self.base}/segment/{cube}"

    def segment(self, cube: str, seg_id: str) -> str:
        return f"{self.base}/segment/{cube}/{seg_id}"

    @property
    def audit(self) -> str:
        return f"{self.base}/audit"

    @property
    def audit_prefix(self) -> str:
        return f"{self.base}/audit/entry-"

    @property
    def epoch(self) -> str:
        return f"{self.base}/epoch"

    def containers(self) -> list[str]:
        """Folders created once (empty data) before the first metadata transaction."""
        b = self.base
        return [b, f"{b}/model", f"{b}/cube_desc", f"{b}/cube", f"{b}/cube_statistics", f"{b}/segment", self.audit, self.epoch]

    def kind(self, path: str) -> tuple[str, str]:
        """('cube', name), ('segment', 'cube/id'), ('audit', entry), ... for a path under base."""
        rel = path[len(self.base) + 1 :] if path.startswith(self.base + "/") else ""
        head, _, rest = rel.partition("/")
        return head, rest


# -- ops ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Op:
    """One multi op, independent of the client: create / set / delete / check."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    sequence: bool = False

    @staticmethod
    def create(path: str, data: bytes, sequence: bool = False) -> Op:
        return Op("create", path, data, -1, sequence)

    @staticmethod
    def set(path: str, data: bytes, version: int) -> Op:
        return Op("set", path, data, version)

    @staticmethod
    def delete(path: str, version: int) -> Op:
        return Op("delete", path, b"", version)

    @staticmethod
    def check(path: str, version: int) -> Op:
        return Op("check", path, b"", version)


@dataclasses.dataclass
class Versioned:
    """A document with the znode version it was read at (-1: absent)."""

    doc: Any
    version: int = -1
    mzxid: int = 0


@dataclasses.dataclass
class CubeState:
    """What a build or merge reads before it writes (the MVCC read set)."""

    cube: Versioned  # CubeInstance
    stats: Versioned  # CubeStatistics
    segments: dict[str, Versioned] = dataclasses.field(default_factory=dict)  # id -> Segment


class PlanError(ValueError):
    """The requested change does not apply to the current metadata (overlap, unknown segment)."""


def _keys(layout: Layout, pairs: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"meta_key": p[len(layout.base) :], "mvcc": v} for p, v in pairs]


def recompute_stats(cube_name: str, segments: Sequence[Segment], job_id: str) -> CubeStatistics:
    cuboid_rows: dict[str, int] = {}
    for s in segments:
        for k, v in s.cuboid_rows.items():
            cuboid_rows[k] = cuboid_rows.get(k, 0) + int(v)
    return CubeStatistics(
        cube=cube_name, segment_count=len(segments), total_rows=sum(s.row_count for s in segments),
        total_input_records=sum(s.input_records for s in segments), total_size_bytes=sum(s.size_bytes for s in segments),
        cuboid_rows=dict(sorted(cuboid_rows.items(), key=lambda kv: int(kv[0]), reverse=True)), last_build_job_id=job_id,
    )  # fmt: skip


def plan_build(layout: Layout, state: CubeState, segment: Segment, audit: AuditEntry, epoch_check: Op | None) -> list[Op]:
    """Ops that add a freshly built segment: segment node + cube instance + statistics + audit."""
    cube: CubeInstance = state.cube.doc
    if state.cube.version < 0:
        raise PlanError(f"cube {layout.cube(cube.name)} does not exist")
    for ref in cube.segments:
        if overlaps(ref.date_range_start, ref.date_range_end, segment.date_range_start, segment.date_range_end):
            raise PlanError(f"segment {segment.name} overlaps {ref.name} of cube {cube.name}")
    new_cube = CubeInstance.from_dict(cube.to_dict())
    new_cube.segments = sorted([*new_cube.segments, segment.ref()], key=lambda s: s.date_range_start)
    new_cube.status = CUBE_READY
    new_cube.base_zxid = state.cube.mzxid
    new_cube.last_modified = now_ms()
    live = [v.doc for v in state.segments.values() if v.doc.uuid in {s.id for s in cube.segments}]
    stats = recompute_stats(cube.name, [*live, segment], audit.unit_id)
    return _assemble(layout, state, new_cube, stats, creates=[segment], deletes=[], audit=audit, epoch_check=epoch_check)


def plan_merge(layout: Layout, state: CubeState, merged: Segment, audit: AuditEntry, epoch_check: Op | None) -> list[Op]:
    """Ops that replace the segments ``merged.merged_from`` by ``merged`` (one atomic swap)."""
    cube: CubeInstance = state.cube.doc
    ids = list(merged.merged_from)
    listed = {s.id: s for s in cube.segments}
    missing = [i for i in ids if i not in listed or i not in state.segments]
    if len(ids) < 2 or missing:
        raise PlanError(f"cannot merge {ids}: not ready segments of cube {cube.name} ({missing})")
    new_cube = CubeInstance.from_dict(cube.to_dict())
    new_cube.segments = sorted([s for s in new_cube.segments if s.id not in ids] + [merged.ref()], key=lambda s: s.date_range_start)
    new_cube.base_zxid = state.cube.mzxid
    new_cube.last_modified = now_ms()
    for a, b in itertools.pairwise(new_cube.segments):
        if overlaps(a.date_range_start, a.date_range_end, b.date_range_start, b.date_range_end):
            raise PlanError(f"merged segment {merged.name} overlaps {a.name if b.id == merged.uuid else b.name}")
    keep = {s.id for s in new_cube.segments}
    live = [v.doc for k, v in state.segments.items() if k in keep] + [merged]
    stats = recompute_stats(cube.name, live, audit.unit_id)
    deletes = [(layout.segment(cube.name, i), state.segments[i].version) for i in ids]
    return _assemble(layout, state, new_cube, stats, creates=[merged], deletes=deletes, audit=audit, epoch_check=epoch_check)


def _assemble(layout: Layout, state: CubeState, cube: CubeInstance, stats: CubeStatistics, *, creates: list[Segment],
              deletes: list[tuple[str, int]], audit: AuditEntry, epoch_check: Op | None) -> list[Op]:  # fmt: skip
    ops: list[Op] = []
    if epoch_check is not None:
        ops.append(epoch_check)
    cube_path, stats_path = layout.cube(cube.name), layout.statistics(cube.name)
    touched = [(cube_path, state.cube.version + 1)]
    for seg in creates:
        ops.append(Op.create(layout.segment(cube.name, seg.uuid), seg.to_json()))
        touched.append((layout.segment(cube.name, seg.uuid), 0))
    for path, version in deletes:
        ops.append(Op.delete(path, version))
        touched.append((path, -1))
    ops.append(Op.set(cube_path, cube.to_json(), state.cube.version))
    if state.stats.version >= 0:
        ops.append(Op.set(stats_path, stats.to_json(), state.stats.version))
        touched.append((stats_path, state.stats.version + 1))
    else:
        ops.append(Op.create(stats_path, stats.to_json()))
        touched.append((stats_path, 0))
    audit.keys = _keys(layout, touched)
    ops.append(Op.create(layout.audit_prefix, audit.to_json(), sequence=True))
    return ops


def plan_create_project(layout: Layout, project: ProjectDesc, model: ModelDesc, desc: CubeDesc, cube: CubeInstance,
                        audit: AuditEntry, epoch_check: Op | None, existing: dict[str, int]) -> list[Op]:  # fmt: skip
    """Ops that create (or update, with version checks) the project, model, descriptor and an
    empty cube instance.  ``existing`` maps paths already present to their versions; an
    existing cube instance is left alone (its segments stay)."""
    ops: list[Op] = [epoch_check] if epoch_check is not None else []
    touched: list[tuple[str, int]] = []
    segs = layout.segments(cube.name)
    if segs not in existing:
        ops.append(Op.create(segs, b""))
    for path, doc in ((layout.project_path, project), (layout.model(model.name), model), (layout.cube_desc(desc.name), desc)):
        if path in existing:
            ops.append(Op.set(path, doc.to_json(), existing[path]))
            touched.append((path, existing[path] + 1))
        else:
            ops.append(Op.create(path, doc.to_json()))
            touched.append((path, 0))
    if layout.cube(cube.name) not in existing:
        ops.append(Op.create(layout.cube(cube.name), cube.to_json()))
        touched.append((layout.cube(cube.name), 0))
    audit.keys = _keys(layout, touched)
    ops.append(Op.create(layout.audit_prefix, audit.to_json(), sequence=True))
    return ops


# -- the demo's sales model --------------------------------------------------------------
def sales_model() -> ModelDesc:
    return ModelDesc(
        name="sales_model",
        fact_table="DEFAULT.SALES_FACT",
        dimensions=[{"table": "SALES_FACT", "columns": ["sale_date", "region", "country", "category", "product", "channel"]}],
        metrics=["quantity", "price", "revenue", "customer_id"],
        computed_columns=[{"columnName": "revenue", "expression": "quantity * price", "datatype": "double"}],
        partition_desc={"partition_date_column": "sale_date", "partition_type": "APPEND", "partition_date_format": "yyyy-MM-dd"},
    )


def _measure(name: str, fn: str, value: str, returntype: str, kind: str = "column") -> dict[str, Any]:
    return {"name": name, "function": {"expression": fn, "parameter": {"type": kind, "value": value}, "returntype": returntype}}


def sales_cube_desc() -> CubeDesc:
    dims = ["sale_date", "region", "country", "category", "product", "channel"]
    return CubeDesc(
        name="sales_cube",
        model_name="sales_model",
        description="daily sales by geography, product and channel",
        dimensions=[{"name": d.upper(), "table": "SALES_FACT", "column": d} for d in dims],
        measures=[
            _measure("_COUNT_", "COUNT", "1", "bigint", "constant"),
            _measure("TOTAL_QUANTITY", "SUM", "quantity", "bigint"),
            _measure("REVENUE", "SUM", "revenue", "double"),
            _measure("MIN_PRICE", "MIN", "price", "double"),
            _measure("MAX_PRICE", "MAX", "price", "double"),
            _measure("CUSTOMERS", "COUNT_DISTINCT", "customer_id", "hllc(10)"),
        ],
        aggregation_groups=[  # two groups, as Kylin users do: geography x channel, product x channel
            {"includes": ["sale_date", "region", "country", "channel"],
             "select_rule": {"hierarchy_dims": [["region", "country"]], "mandatory_dims": [], "joint_dims": []}},
            {"includes": ["sale_date", "category", "product", "channel"],
             "select_rule": {"hierarchy_dims": [["category", "product"]], "mandatory_dims": [], "joint_dims": []}},
        ],  # fmt: skip
    )


def sales_project(name: str) -> ProjectDesc:
    return ProjectDesc(
        name=name, description="zabby Spark cube demo", models=["sales_model"], tables=["DEFAULT.SALES_FACT"],
        realizations=[{"name": "sales_cube", "type": "CUBE", "realization": "sales_cube"}],
    )  # fmt: skip
