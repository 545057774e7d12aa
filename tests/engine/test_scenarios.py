"""Seeded scenarios of decisions that used to live only in the server's shell, now run through
the simulator's cluster of engines (the code the server runs):

- prep errors: a failed write is an ERROR txn, answered in session order, on the leader and
  through a learner alike, and logged by every server;
- session expiry: a session nobody touches expires on the leader, and its ephemerals go on
  every server;
- container and TTL reaping by the leader;
- a SNAP chosen in the same Ready as later commits: the learner gets the tree exactly at
  the declared zxid (the simulated shell checks each image against its SNAP).
"""

from __future__ import annotations

from tests.core.scenario import ACL, Scenario
from zabby.core.messages import Snap
from zabby.engine.clients import java_hash_set_order
from zabby.errors import Err
from zabby.opcodes import CreateMode, OpCode


def leader_of(c: Scenario) -> int:
    node = c.run_until(c.serving_leader)
    c.run_until(c.all_serving)
    return node.sid


def on_every_server(c: Scenario, path: str) -> list[bool]:
    return [c.node(sid).tree.get(path) is not None for sid in sorted(c.cluster.nodes)]


def test_a_failed_write_is_an_error_txn_answered_in_order_on_every_path() -> None:
    c = Scenario(voters=3)
    leader = leader_of(c)
    learner = next(sid for sid in (1, 2, 3) if sid != leader)
    session = c.open_session(learner, 4000)
    first = c.call(learner, session, OpCode.CREATE, "/x", b"1", ACL, int(CreateMode.PERSISTENT), None)
    again = c.call(learner, session, OpCode.CREATE, "/x", b"2", ACL, int(CreateMode.PERSISTENT), None)
    c.run_until(lambda: first and again)
    on_leader = c.call(leader, session, OpCode.SET_DATA, "/x", b"3", 7)
    c.run_until(lambda: on_leader)
    assert first[0][0].type == OpCode.CREATE
    assert again[0][0].type == OpCode.ERROR and again[0][0].body[0] == Err.NODEEXISTS
    assert on_leader[0][0].type == OpCode.ERROR and on_leader[0][0].body[0] == Err.BADVERSION
    assert first[0][0].zxid < again[0][0].zxid < on_leader[0][0].zxid  # every answer through the log
    c.run_until(c.converged)
    for sid in (1, 2, 3):
        logged = {txn.zxid: txn.type for txn in c.node(sid).storage.logged_after(0)}
        assert logged[again[0][0].zxid] == OpCode.ERROR, sid


def test_a_session_nobody_touches_expires_and_its_ephemerals_go_everywhere() -> None:
    c = Scenario(voters=3)
    leader = leader_of(c)
    learner = next(sid for sid in (1, 2, 3) if sid != leader)
    session = c.open_session(learner, 1000)
    made = c.call(learner, session, OpCode.CREATE, "/eph", b"", ACL, int(CreateMode.EPHEMERAL), None)
    c.run_until(lambda: made and all(on_every_server(c, "/eph")))
    c.run_until(lambda: not any(on_every_server(c, "/eph")), ticks_max=200)  # 1 s: 20 ticks, then a bucket
    assert all(session not in c.node(sid).tree.sessions for sid in (1, 2, 3))
    late = c.call(leader, session, OpCode.CREATE, "/eph2", b"", ACL, int(CreateMode.EPHEMERAL), None)
    c.run_until(lambda: late)
    assert late[0][0].type == OpCode.ERROR and late[0][0].body[0] == Err.SESSIONEXPIRED
    assert not any(on_every_server(c, "/eph2"))


def test_a_session_that_is_touched_lives_on() -> None:
    c = Scenario(voters=3)
    leader = leader_of(c)
    learner = next(sid for sid in (1, 2, 3) if sid != leader)
    session = c.open_session(learner, 1000)
    c.call(learner, session, OpCode.CREATE, "/eph", b"", ACL, int(CreateMode.EPHEMERAL), None)
    for _ in range(20):
        c.node(learner).engine.touch(session)  # what a client's pings do, through its learner
        c.run(5)
    assert all(on_every_server(c, "/eph"))


def test_an_emptied_container_and_an_expired_ttl_node_are_reaped_everywhere() -> None:
    c = Scenario(voters=3)
    leader = leader_of(c)
    session = c.open_session(leader, 4000)
    c.call(leader, session, OpCode.CREATE_CONTAINER, "/c", b"", ACL, int(CreateMode.CONTAINER), None)
    c.call(leader, session, OpCode.CREATE, "/c/child", b"", ACL, int(CreateMode.PERSISTENT), None)
    c.call(leader, session, OpCode.CREATE_TTL, "/t", b"", ACL, int(CreateMode.PERSISTENT_WITH_TTL), 200)
    c.call(leader, session, OpCode.CREATE_CONTAINER, "/never-filled", b"", ACL, int(CreateMode.CONTAINER), None)
    c.run_until(lambda: all(on_every_server(c, "/c/child")) and all(on_every_server(c, "/t")))
    c.call(leader, session, OpCode.DELETE, "/c/child", -1)
    c.run_until(lambda: not any(on_every_server(c, "/c")) and not any(on_every_server(c, "/t")), ticks_max=300)
    assert all(on_every_server(c, "/never-filled"))  # a container that never had a child stays


def test_expired_ttl_nodes_are_reaped_in_zookeepers_order() -> None:
    """ZooKeeper deletes what its ContainerManager gathers in a java.util.HashSet's order, and
    watchers see the events in it: here the reverse of the paths' sorted order (differential
    seed 711 found zabby reaping in sorted order)."""
    c = Scenario(voters=3)
    leader = leader_of(c)
    session = c.open_session(leader, 4000)
    for parent in ("/r", "/r/c", "/r/c0000000002"):
        c.call(leader, session, OpCode.CREATE, parent, b"", ACL, int(CreateMode.PERSISTENT), None)
    ttl_nodes = ("/r/c/c", "/r/c0000000002/c0000000001")  # in path order; Java's is the reverse
    for path in ttl_nodes:
        c.call(leader, session, OpCode.CREATE_TTL, path, b"", ACL, int(CreateMode.PERSISTENT_WITH_TTL), 200)
    c.run_until(lambda: all(on_every_server(c, ttl_nodes[1])))
    c.run_until(lambda: not any(any(on_every_server(c, path)) for path in ttl_nodes), ticks_max=300)
    reaped = [txn.body[0] for txn in c.node(leader).engine.peer.history.after(0) if txn.type == OpCode.DELETE_CONTAINER]
    assert reaped == ["/r/c0000000002/c0000000001", "/r/c/c"]


def test_java_hash_set_order_is_javas() -> None:
    """Orders printed by java.util.HashSet (OpenJDK 17) for the same insertions: two buckets,
    non-ASCII and non-BMP paths, and a set that grew to 64 buckets."""
    assert java_hash_set_order(["/diff-711/c/c", "/diff-711/c0000000002/c0000000001"]) == [
        "/diff-711/c0000000002/c0000000001", "/diff-711/c/c"]  # fmt: skip
    paths = ["/a", "/b", "/c", "/app/locks", "/app/lock-0000000001", "/x/y/z", "/é/ü", "/😀"]
    assert java_hash_set_order(paths) == ["/a", "/b", "/c", "/😀", "/app/locks", "/app/lock-0000000001", "/x/y/z", "/é/ü"]
    java = ("19 16 38 15 37 18 17 39 12 34 11 33 14 36 13 35 30 10 32 31 3 27 2 26 1 29 0 28 23 22 25 24 21 20 7 6 5 4 "
            "9 8").split()  # fmt: skip
    assert java_hash_set_order(f"/t/n{i}" for i in range(40)) == [f"/t/n{i}" for i in java]


def test_a_snap_chosen_while_commits_move_the_tree_on_carries_exactly_its_zxid() -> None:
    """The leader's Ready holds the ACKEPOCH that picks a SNAP and the ACKs that commit more;
    the simulated shell raises if an image is not at its SNAP's zxid."""
    c = Scenario(voters=3, commit_log_count=5, delay_ticks_max=2)  # ACKs and the ACKEPOCH arrive together
    leader = leader_of(c)
    follower = next(sid for sid in (1, 2, 3) if sid != leader)
    trees_at_send: list[tuple[int, int]] = []
    network_send = c.cluster.network.send

    def send(now: int, src: int, dst: int, message: object) -> None:
        if isinstance(message, Snap):
            trees_at_send.append((message.zxid, c.node(src).tree.last_zxid))
        network_send(now, src, dst, message)

    c.cluster.network.send = send  # type: ignore[method-assign]
    c.down(follower)
    for index in range(20):  # past the DIFF window of 5
        c.write(leader, f"/before{index}")
    c.run(10)
    c.node(follower).restart_at = 0
    c.restart(follower)
    index = 0
    while not trees_at_send or not c.node(follower).serving:
        c.write(leader, f"/during{index}-a")  # writes every tick keep commits in every Ready
        c.write(leader, f"/during{index}-b")
        c.run(1)
        index += 1
        assert index < 500, "the follower never synced"
    assert any(snap_zxid < tree_zxid for snap_zxid, tree_zxid in trees_at_send), trees_at_send
    c.run_until(c.converged)
    assert c.node(follower).tree.content_hash() == c.node(leader).tree.content_hash()
