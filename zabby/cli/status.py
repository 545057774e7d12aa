"""The four-letter words of every server in a connect string, side by side.

Each host is asked ``srvr`` (always whitelisted) and ``mntr`` (for what ``srvr`` lacks) over
its own short-lived socket, all hosts in parallel, each bounded by ``timeout_s``.  A host that
refuses the connection or does not answer in time is shown as ``unreachable``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from zabby.client.connection import parse_hosts
from zabby.client.fourletter import four_letter
from zabby.wire.fourletter import parse_mntr, parse_srvr

COLUMNS = ("HOST", "MODE", "ZXID", "DIGEST", "CONNECTIONS", "OUTSTANDING", "LATENCY min/avg/max", "NODES")


@dataclass
class ServerStatus:
    host: str
    port: int
    reachable: bool = False
    mode: str = ""
    zxid: str = ""
    digest: str = ""  # the tree digest at ``zxid`` (both from one mntr answer)
    connections: str = ""
    outstanding: str = ""
    latency: str = ""
    nodes: str = ""
    error: str = ""
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def row(self) -> tuple[str, ...]:
        if not self.reachable:
            return (self.address, "unreachable", "-", "-", "-", "-", "-", "-")
        return (self.address, self.mode or "-", self.zxid or "-", self.digest or "-", self.connections or "-",
                self.outstanding or "-", self.latency or "-", self.nodes or "-")  # fmt: skip


def _num(text: str) -> str:
    """Latency values as srvr prints them; mntr's floats trimmed to 4 decimals."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value == int(value) else f"{value:.4g}"


def query(host: str, port: int, timeout_s: float = 2.0) -> ServerStatus:
    status = ServerStatus(host, port)
    try:
        srvr = four_letter(port, "srvr", timeout_s, host)
    except OSError as exc:
        status.error = str(exc) or type(exc).__name__
        return status
    status.reachable = True
    try:
        mntr = parse_mntr(four_letter(port, "mntr", timeout_s, host))
    except OSError:
        mntr = {}
    fields = parse_srvr(srvr)
    status.raw = {**fields, **mntr}
    if "not currently serving" in srvr:
        status.mode = "not serving"
    elif "not in the whitelist" in srvr and not mntr:
        status.mode = "srvr disabled"
    else:
        status.mode = fields.get("Mode") or mntr.get("zk_server_state", "")
    status.zxid = fields.get("Zxid") or mntr.get("zk_last_zxid", "")
    if "zk_digest" in mntr:  # show the zxid the digest belongs to: srvr may have answered at another
        status.zxid, status.digest = mntr.get("zk_last_zxid", status.zxid), mntr["zk_digest"]
    status.connections = fields.get("Connections") or mntr.get("zk_num_alive_connections", "")
    status.outstanding = fields.get("Outstanding") or mntr.get("zk_outstanding_requests", "")
    status.nodes = fields.get("Node count") or mntr.get("zk_znode_count", "")
    latency = fields.get("Latency min/avg/max", "")
    if not latency and "zk_avg_latency" in mntr:
        latency = "/".join(_num(mntr.get(f"zk_{k}_latency", "?")) for k in ("min", "avg", "max"))
    status.latency = latency
    return status


def query_all(hosts: str, timeout_s: float = 2.0) -> list[ServerStatus]:
    """Every host of a connect string (``h1:p1,h2:p2/chroot``), in the order given."""
    addresses, _chroot = parse_hosts(hosts)
    with ThreadPoolExecutor(max_workers=min(16, len(addresses))) as pool:
        return list(pool.map(lambda hp: query(hp[0], hp[1], timeout_s), addresses))


def format_table(statuses: list[ServerStatus]) -> str:
    rows = [COLUMNS] + [s.row() for s in statuses]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"
