"""The reconfig nemesis' planning: which voter a fault takes (never one the quorum needs), how
a heal undoes any membership (including ones left by reconfigs of unknown outcome), the groups
(``mixed`` unchanged), and the redirect library that keeps one proxy per link after a reconfig."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from harness.jepsen.nemesis import GROUPS, KINDS, kinds_for, reconfigures, schedule, spares_for
from harness.jepsen.reconfig import RECONFIG_KINDS, Change, NotPossible, applied, plan_fault, plan_restore, roles
from zabby.membership import Membership

FIVE = {sid: "participant" for sid in range(1, 6)}
THREE = {sid: "participant" for sid in range(1, 4)}


def test_mixed_draws_what_it_drew_and_the_reconfig_groups_add_the_new_kinds() -> None:
    assert GROUPS["mixed"] == KINDS and not set(RECONFIG_KINDS) & set(KINDS)
    assert GROUPS["reconfig"] == RECONFIG_KINDS
    assert GROUPS["mixed-reconfig"] == KINDS + RECONFIG_KINDS
    assert schedule(5, 60.0, GROUPS["mixed"], 8.0, 4.0) == schedule(5, 60.0, KINDS, 8.0, 4.0)
    assert kinds_for("reconfig-remove,kill-leader") == ("reconfig-remove", "kill-leader")
    assert reconfigures(kinds_for("mixed-reconfig")) and not reconfigures(kinds_for("mixed"))
    assert spares_for(kinds_for("reconfig")) == 1 and spares_for(kinds_for("reconfig-remove")) == 0
    with pytest.raises(ValueError):
        kinds_for("reconfig-everything")


def test_faults_take_one_voter_the_leader_about_a_third_of_the_time() -> None:
    rng = random.Random(1)
    taken = Counter(plan_fault("reconfig-remove", FIVE, 3, [], rng).leaving[0] for _ in range(3000))
    assert set(taken) == set(FIVE)
    assert 0.38 < taken[3] / 3000 < 0.52  # 1/3 + 2/3 * 1/5
    stops = [plan_fault("reconfig-remove", THREE, None, [], rng).stop for _ in range(400)]
    assert 120 < sum(1 for s in stops if s) < 280  # stopped half the time
    demoted = plan_fault("reconfig-observer", THREE, 2, [], rng)
    assert demoted.observers and not demoted.leaving and not demoted.joining and not demoted.stop
    cut = plan_fault("reconfig-partition", FIVE, 1, [], rng)
    assert len(cut.leaving) == 1 and not cut.stop


def test_a_replacement_starts_a_spare_and_stops_the_member_it_replaces() -> None:
    change = plan_fault("reconfig-replace", FIVE, 1, [6], random.Random(2))
    assert change.start == (6,) and change.joining == (6,)
    assert change.leaving == change.stop and change.leaving[0] in FIVE
    with pytest.raises(NotPossible):
        plan_fault("reconfig-replace", {**FIVE, 6: "participant"}, 1, [6], random.Random(2))  # the spare is in use


def test_no_fault_leaves_fewer_than_two_voters() -> None:
    two_and_an_observer = {1: "participant", 2: "participant", 3: "observer"}
    for kind in RECONFIG_KINDS:
        with pytest.raises(NotPossible):
            plan_fault(kind, two_and_an_observer, 1, [4], random.Random(3))
    with pytest.raises(ValueError):
        plan_fault("kill-leader", FIVE, 1, [], random.Random(3))


def test_restore_undoes_every_change_from_what_the_servers_report() -> None:
    original = (1, 2, 3, 4, 5)
    assert plan_restore(FIVE, original, set()).empty
    # removed and stopped: restarted, then joins; removed and running: joins
    removed = plan_restore({1: "participant", 2: "participant", 4: "participant", 5: "participant"}, original, {3})
    assert removed == Change(joining=(3,), start=(3,))
    assert plan_restore({1: "participant", 2: "participant", 4: "participant", 5: "participant"}, original, set()).start == ()
    # demoted: promoted back, nothing to start
    assert plan_restore({**FIVE, 2: "observer"}, original, set()) == Change(joining=(2,))
    # replaced: the original comes back (restarted), the spare leaves and is stopped, in one reconfig
    replaced = plan_restore({1: "participant", 2: "participant", 3: "participant", 5: "participant", 6: "participant"}, original, {4})
    assert replaced == Change(joining=(4,), leaving=(6,), start=(4,), stop=(6,))
    # a spare that joined as an observer (or a reconfig of unknown outcome that committed late)
    assert plan_restore({**FIVE, 6: "observer"}, original, set()) == Change(leaving=(6,), stop=(6,))


def test_applied_tells_a_committed_change_from_one_that_did_not_happen() -> None:
    change = Change(joining=(6,), leaving=(4,), start=(6,), stop=(4,))
    assert not applied(change, FIVE)
    assert applied(change, {1: "participant", 2: "participant", 3: "participant", 5: "participant", 6: "participant"})
    assert applied(Change(observers=(2,)), {**FIVE, 2: "observer"}) and not applied(Change(observers=(2,)), FIVE)


def test_roles_read_zookeeper_and_zabby_config_text() -> None:
    text = "server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nserver.2=127.0.0.1:2889:3889:observer\nversion=100000003\n"
    membership = Membership.parse(text)
    assert roles(membership) == {1: "participant", 2: "observer"} and membership.version == 0x100000003


def test_redirect_library_sends_a_connect_to_the_link_proxy() -> None:
    from harness.jepsen.cluster import REDIRECT_ENV, build_redirect

    try:
        library = build_redirect()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no C compiler: {exc}")
    proxy = socket.create_server(("127.0.0.1", 0))
    real = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def accept(server: socket.socket, name: str) -> None:
        server.settimeout(20)
        try:
            conn, _ = server.accept()
            seen.append(name)
            conn.close()
        except OSError:
            pass

    threads = [threading.Thread(target=accept, args=(proxy, "proxy"), daemon=True)]  # (real only listens)
    for thread in threads:
        thread.start()
    real_port, proxy_port = real.getsockname()[1], proxy.getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {real_port}), timeout=10).close()"
    env = {"LD_PRELOAD": str(library), REDIRECT_ENV: f"1={proxy_port},{real_port}={proxy_port}"}  # (a mapping it never uses first)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
    threads[0].join(10)
    assert seen == ["proxy"]
    # nobody listens behind the proxy: refused at once, as without a proxy
    real.close()
    refused = f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {real_port}), timeout=10)\nexcept ConnectionRefusedError:\n print('refused')"
    done = subprocess.run([sys.executable, "-c", refused], env=env, check=True, timeout=30, capture_output=True, text=True)
    assert done.stdout.strip() == "refused"
    proxy.close()


def test_servers_run_this_checkouts_code() -> None:
    from harness import CHECKOUT
    from harness.jepsen import cluster
    from zabby.testing.processes import code_root

    assert (CHECKOUT / "harness" / "jepsen" / "cluster.py").resolve() == Path(cluster.__file__).resolve()
    assert code_root() == CHECKOUT  # launch_server's default: the cluster's servers run the zabby of this checkout
