"""The pure metadata model: JSON round trips, cuboid pruning, the ops of a build and a merge."""

from __future__ import annotations

import json

import pytest

from zabby.spark.model import (
    AuditEntry, CubeDesc, CubeInstance, CubeState, CubeStatistics, Layout, Op, PlanError, ProjectDesc, Segment,
    Versioned, enumerate_cuboids, plan_build, plan_merge, sales_cube_desc, sales_model, sales_project, segment_name,
)  # fmt: skip


def seg(uid: str, start: str, end: str, rows: int = 10) -> Segment:
    return Segment(uuid=uid, name=segment_name(start, end), date_range_start=start, date_range_end=end, row_count=rows,
                   input_records=rows * 3, cuboid_count=2, size_bytes=100, cuboid_rows={"63": rows - 1, "0": 1})  # fmt: skip


@pytest.mark.parametrize("doc", [sales_project("p"), sales_model(), sales_cube_desc(),
                                 CubeInstance(name="c", descriptor="c", segments=[seg("a", "2024-01-01", "2024-01-02").ref()]),
                                 seg("a", "2024-01-01", "2024-01-02"), CubeStatistics(cube="c", cuboid_rows={"1": 2}),
                                 AuditEntry(unit_id="u", action="BUILD", message="m", keys=[{"meta_key": "/x", "mvcc": 1}])])  # fmt: skip
def test_documents_round_trip(doc: object) -> None:
    again = type(doc).from_json(doc.to_json())  # type: ignore[attr-defined]
    assert again == doc
    assert json.loads(again.to_json()) == json.loads(doc.to_json())  # type: ignore[attr-defined]


def test_unknown_keys_are_kept() -> None:
    raw = json.loads(sales_project("p").to_json())
    raw["future_field"] = {"x": 1}
    doc = ProjectDesc.from_dict(raw)
    assert doc.extra == {"future_field": {"x": 1}} and json.loads(doc.to_json())["future_field"] == {"x": 1}


def test_cuboid_pruning() -> None:
    dims = ["d", "r", "c", "ch"]
    full = enumerate_cuboids(dims, [])
    assert len(full) == 16 and full[0] == tuple(dims) and full[-1] == ()
    hier = enumerate_cuboids(dims, [{"includes": dims, "select_rule": {"hierarchy_dims": [["r", "c"]], "mandatory_dims": ["d"]}}])
    assert ("d", "c") not in hier and ("d", "r", "c") in hier and all("d" in c for c in hier)
    assert len(hier) == 3 * 2
    desc = sales_cube_desc()
    assert len(desc.cuboids()) == 21 and desc.cuboid_id(desc.dimension_columns) == 63 and desc.cuboid_id([]) == 0
    assert desc.cuboid_id(["sale_date"]) == 32 and desc.cuboid_id(["channel"]) == 1


def test_layout() -> None:
    lay = Layout("proj")
    assert lay.cube("c") == "/kylin/proj/cube/c" and lay.segment("c", "s") == "/kylin/proj/segment/c/s"
    assert lay.kind("/kylin/proj/cube/c") == ("cube", "c") and lay.kind("/kylin/proj/segment/c/s") == ("segment", "c/s")
    with pytest.raises(ValueError):
        Layout("a/b")


def state_with(segments: list[Segment], cube_version: int = 3, stats_version: int = 1) -> CubeState:
    cube = CubeInstance(name="c", descriptor="c", segments=[s.ref() for s in segments])
    return CubeState(Versioned(cube, cube_version, 77), Versioned(CubeStatistics(cube="c"), stats_version, 70),
                     {s.uuid: Versioned(s, 0, 60) for s in segments})  # fmt: skip


def test_plan_build_is_one_fenced_versioned_multi() -> None:
    lay = Layout("p")
    old = seg("a", "2024-01-01", "2024-01-10")
    new = seg("b", "2024-01-10", "2024-01-20", rows=20)
    ops = plan_build(lay, state_with([old]), new, AuditEntry(unit_id="u", action="BUILD", message="m"), Op.check("/kylin/p/epoch/x", 0))
    kinds = [(o.kind, o.path) for o in ops]
    assert kinds[0] == ("check", "/kylin/p/epoch/x")
    assert ("create", "/kylin/p/segment/c/b") in kinds
    cube_op = next(o for o in ops if o.path == "/kylin/p/cube/c")
    stats_op = next(o for o in ops if o.path == "/kylin/p/cube_statistics/c")
    assert cube_op.kind == "set" and cube_op.version == 3 and stats_op.version == 1
    assert ops[-1].kind == "create" and ops[-1].sequence and ops[-1].path == "/kylin/p/audit/entry-"
    cube = CubeInstance.from_json(cube_op.data)
    assert [s.id for s in cube.segments] == ["a", "b"] and cube.base_zxid == 77 and cube.status == "READY"
    stats = CubeStatistics.from_json(stats_op.data)
    assert stats.total_rows == 30 and stats.segment_count == 2 and stats.cuboid_rows == {"63": 28, "0": 2}
    audit = AuditEntry.from_json(ops[-1].data)
    assert {"meta_key": "/cube/c", "mvcc": 4} in audit.keys
    with pytest.raises(PlanError):  # overlapping range
        plan_build(lay, state_with([old, new]), seg("x", "2024-01-15", "2024-01-25"), AuditEntry(unit_id="u", action="B", message=""), None)


def test_plan_merge_swaps_segments_atomically() -> None:
    lay = Layout("p")
    a, b, c = seg("a", "2024-01-01", "2024-01-10"), seg("b", "2024-01-10", "2024-01-20"), seg("c", "2024-01-20", "2024-01-30")
    merged = seg("m", "2024-01-01", "2024-01-20", rows=18)
    merged.merged_from = ["a", "b"]
    ops = plan_merge(lay, state_with([a, b, c]), merged, AuditEntry(unit_id="u", action="MERGE", message="m"), None)
    assert ("delete", "/kylin/p/segment/c/a", 0) in [(o.kind, o.path, o.version) for o in ops]
    assert ("delete", "/kylin/p/segment/c/b", 0) in [(o.kind, o.path, o.version) for o in ops]
    cube = CubeInstance.from_json(next(o for o in ops if o.path == "/kylin/p/cube/c").data)
    assert [s.id for s in cube.segments] == ["m", "c"]
    merged.merged_from = ["a", "zz"]
    with pytest.raises(PlanError):
        plan_merge(lay, state_with([a, b, c]), merged, AuditEntry(unit_id="u", action="MERGE", message="m"), None)


def test_custom_cube_desc_json() -> None:
    raw = json.loads(sales_cube_desc().to_json())
    raw["measures"].append({"name": "BAD", "function": {"expression": "TOP_N", "parameter": {"type": "column", "value": "x"}}})
    with pytest.raises(ValueError):
        CubeDesc.from_dict(raw).validate()
