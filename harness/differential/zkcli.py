"""zkCli.sh (ZooKeeper 3.8's own shell, Debian's package) against ZooKeeper and against zabby:
the same script of commands, every command of its ``help`` with its options, and the output
compared line by line once what differs by nature is masked (zxids and session ids, times,
ports), what ZooKeeper prints in a hash set's order (``whoami``'s ids) is sorted, and the watch
events its event thread prints are compared as a list of their own."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ZKCLI = Path("/usr/share/zookeeper/bin/zkCli.sh")
DIGEST_BOB = "digest:bob:Ks8JVAaCmw4B7oHGIcGLPvGeNTE=:cdrwa"  # bob:secret

COMMANDS = f"""version
create /c
create /c/a data1
create -e /c/eph e
create -s /c/seq- s
create -c /c/box
create -t 60000 /c/ttl t
create /c/acl x {DIGEST_BOB}
create /c/a again
create /nope/child x
ls /c
ls -s /c
ls -R /c
ls -w /c
get /c/a
get -s /c/a
get -w /c/a
get /c/missing
set /c/a data2
set -s /c/a data3
set -v 99 /c/a nope
stat /c/a
stat -w /c/a
stat /c/missing
getAcl /c/acl
getAcl -s /c/a
setAcl /c/a world:anyone:cdrwa
setAcl -s /c/a world:anyone:cdrw
setAcl /c/a nosuch:scheme:cdrwa
getAllChildrenNumber /c
getEphemerals /c
sync /c
get /c/acl
addauth digest bob:secret
whoami
get /c/acl
printwatches
printwatches off
printwatches on
addWatch /c
addWatch -m PERSISTENT /c/a
removewatches /c
removewatches /c/a -d
removewatches /c/missing
setquota -n 5 /c
listquota /c
delquota -n /c
config
reconfig -remove 3
delete /c/a
delete /c/missing
delete /c
deleteall /c
ls /
history
redo 0
close
ls /
"""


CLOSED_AT_QUIT = "WatchedEvent state:Closed type:None path:null"


def run(hosts: str, timeout_s: float = 120.0) -> list[str]:
    """zkCli.sh's output for ``COMMANDS`` on ``hosts``, masked (see the module docstring)."""
    done = subprocess.run([str(ZKCLI), "-server", hosts], input=COMMANDS + "quit\n", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout_s, check=False)  # fmt: skip (its errors go to stderr: in order, in one pipe)
    text = "\n".join(line for line in done.stdout.splitlines() if not re.match(r"^(\d{4}-\d\d-\d\d |SLF4J: )", line))  # log lines
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    text = re.sub(r"(ctime|mtime) = .*", r"\1 = ?", text)
    text = re.sub(r"(127\.0\.0\.1|localhost)[:/]\d+", "HOST", text)
    text = re.sub(r"\[zk: [^\]]*\]", "[zk]", text)
    return _events_apart(_sorted_sets(text.splitlines()))


def _events_apart(lines: list[str]) -> list[str]:
    """The watch events zkCli's event thread prints (``WATCHER::``, ``WatchedEvent ...``) land
    among the commands' output as the threads happen to run: compared as their own list.  The
    client's own Closed event at ``quit`` is left out: the event thread prints it or not as it
    races the JVM's exit (a CI run on ZooKeeper printed it and the one on zabby did not)."""
    events = [line for line in lines if line.startswith("WatchedEvent ") and line != CLOSED_AT_QUIT]
    rest = [line for line in lines if not line.startswith("WatchedEvent ") and line not in ("WATCHER::", "")]
    return [*rest, "--- watch events, in order ---", *_removals_sorted(events)]


def _removals_sorted(events: list[str]) -> list[str]:
    """One ``removewatches`` removes several watchers at once, and the Java client delivers
    their ``*WatchRemoved`` events in its own set's order, which varies from run to run: each
    run of consecutive removal events is compared sorted."""
    out: list[str] = []
    run: list[str] = []
    for event in [*events, ""]:
        if "WatchRemoved " in event:
            run.append(event)
            continue
        out.extend(sorted(run))
        run = []
        out.append(event)
    return out[:-1]


def _sorted_sets(lines: list[str]) -> list[str]:
    """``whoami``'s ids (``scheme: id`` lines after ``Auth scheme: User``) in sorted order."""
    out: list[str] = []
    block: list[str] = []
    for line in [*lines, ""]:
        if out and out[-1] == "Auth scheme: User" or block:
            if re.match(r"^\w+: ", line):
                block.append(line)
                continue
            out.extend(sorted(block))
            block = []
        out.append(line)
    return out[:-1]
