"""zoo.cfg → a frozen, validated ``ServerConfig``.  The only reader of configuration files.

The format is ZooKeeper's: ``key=value`` lines, ``#`` comments, relative paths resolved
against the file's folder.  Unknown keys are kept (``extra``) and logged, as ZooKeeper does
with system properties it does not know; a bad value is a ``ConfigError`` naming the key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from zabby.membership import Member, Membership, MembershipError, parse_member
from zabby.tree.txns import RECORD_BYTES_MAX, ZXID_COUNTER_LAST

LOGGER = logging.getLogger("zabby.config")

# ZooKeeper's default: srvr alone.  stat and cons name client addresses, envi the host, its
# user and folders, conf and dirs the data paths: an operator enables what monitoring needs
# (docs/operations.md, "Securing an ensemble"); /metrics on the admin port is the scrape.
DEFAULT_4LW_WHITELIST = frozenset({"srvr"})
ALL_4LW = frozenset(
    {"ruok", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "wchc", "wchp", "dump", "isro", "crst", "srst", "dirs"}
)


TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
CLIENT_AUTH_MODES = ("none", "want", "need")


ZABBY_PROTOCOL, ZOOKEEPER_PROTOCOL = "zabby", "zookeeper"
QUORUM_PROTOCOLS = (ZABBY_PROTOCOL, ZOOKEEPER_PROTOCOL)


class ConfigError(ValueError):
    """A zoo.cfg value is missing or malformed."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """One side's TLS settings: the secure client port's (ZooKeeper's ``ssl.*`` keys) or the
    quorum links' (``ssl.quorum.*``).  Key and trust stores are PEM files only."""

    key_store: Path  # ssl.keyStore.location: the private key and the certificate chain
    key_store_password: str | None = None  # ssl.keyStore.password: of an encrypted key
    trust_store: Path | None = None  # ssl.trustStore.location: CA certificates to check peers with
    client_auth: str = "need"  # ssl.clientAuth: none | want | need (ZooKeeper's default)
    hostname_verification: bool = True  # ssl.hostnameVerification: quorum links check the peer's name
    protocols: tuple[str, ...] = TLS_PROTOCOLS  # ssl.enabledProtocols
    ciphers: str | None = None  # ssl.ciphersuites, in OpenSSL's names


PeerAddress = Member  # one server's addresses and role (``server.N=`` lines)


@dataclass(frozen=True, slots=True)
class PeerLinkLimits:
    """Peer links that have not said who they are yet (``zabby.server.peering.peer_slots``)."""

    unidentified_max: int = 32  # quorum.unidentifiedLinksMax: at once, from hosts no server.N line names
    unidentified_per_host_max: int = 4  # quorum.unidentifiedLinksPerHost: of those, from one source
    member_host_max: int = 8  # quorum.memberHostLinksMax: at once from each member's host, apart from the others


@dataclass(frozen=True, slots=True)
class QuorumAuth:
    """Peer authentication (``quorum.auth.*``): every quorum and election link proves, both
    ways, that each end holds ``secret`` (zabby.server.peering.peer_auth).  ``required`` False takes
    unauthenticated links too: the step of a rolling upgrade from off to on."""

    secret: bytes
    required: bool = True


@dataclass(frozen=True, slots=True)
class ServerConfig:
    data_dir: Path
    data_log_dir: Path
    client_port: int | None = 2181  # None: only the secure port (secureClientPort without clientPort)
    client_port_address: str = "0.0.0.0"
    secure_client_port: int | None = None  # secureClientPort: clients over TLS (``client_tls``)
    secure_client_port_address: str = "0.0.0.0"
    client_tls: TlsConfig | None = None
    quorum_tls: TlsConfig | None = None  # sslQuorum=true: the peer links use TLS
    quorum_auth: QuorumAuth | None = None  # quorum.auth.enabled=true: the peer links authenticate
    peer_links: PeerLinkLimits = PeerLinkLimits()  # quorum.*Links*: peer links before they say who they are
    enforce_quota: bool = False  # zookeeper.enforceQuota: hard quotas refuse writes (QUOTAEXCEEDED)
    sasl_users: dict[str, str] | None = None  # sasl.jaasConfig's Server section: DIGEST-MD5 users (None: no SASL)
    sasl_acls: bool = False  # "sasl" is an ACL scheme (SASL configured, or authProvider names ZooKeeper's SASL provider)
    sasl_super_user: str | None = None  # superUser (zookeeper.superUser): the SASL user that may do anything
    enforce_auth_schemes: frozenset[str] = frozenset()  # enforce.auth.*: a session must hold an id of one of them
    tick_ms: int = 2000
    init_limit_ticks: int = 10
    sync_limit_ticks: int = 5
    session_timeout_ms_min: int = 4000
    session_timeout_ms_max: int = 40000
    election_client_hold_ms: int = 2000  # electionClientHoldMs: how long a server that stops serving holds its idle clients (0: closes them, as ZooKeeper)
    client_connections_per_ip_max: int = 60
    client_connections_max: int = 0  # maxCnxns: connections at once on each client port (0: as descriptors allow)
    descriptor_reserve: int = 64  # descriptorReserve: descriptors no connection may take (zabby.server.process.descriptors)
    snap_count: int = 100_000
    snap_retain_count: int = 3
    purge_interval_hours: float = 1.0
    four_letter_words: frozenset[str] = DEFAULT_4LW_WHITELIST
    jute_buffer_bytes_max: int = 0xFFFFF
    txn_bytes_max: int = 2 * 2**20  # maxTxnBytes: a txn's bytes after every expansion (see txn_limits)
    auth_ids_max: int = 32  # maxAuthIds: the ids one session may prove (addauth, SASL), beside its ip
    acl_entries_max: int = 256  # maxAclEntries: a znode's ACL entries, after ``auth`` is expanded
    txn_acl_entries_max: int = 8192  # maxTxnAclEntries: the entries of the distinct ACLs one txn sets
    znodes_max: int = 10_000_000  # maxZnodes: the tree's znodes (~270 B of memory each, data aside)
    tree_bytes_max: int = 4 * 2**30  # maxTreeBytes: the tree's paths, data and distinct ACLs
    watch_history_bytes: int = 64 * 2**20  # watchHistoryBytes: what the watch history may hold
    turn_ops_max: int = 1_000  # ops the engine applies in one turn of its driver (zabby.engine.engine; the simulator draws it small)
    jute_enabled: bool = True  # juteEnabled: ZooKeeper's binary client protocol on clientPort
    admin_enabled: bool = True
    admin_address: str = "0.0.0.0"
    admin_port: int = 8080
    admin_command_url: str = "/commands"
    admin_connections_max: int = 32  # admin.maxConnections: admin connections at once
    admin_connections_per_host_max: int = 8  # admin.maxConnectionsPerHost: of those, from one source
    admin_idle_timeout_ms: int = 2000  # admin.idleTimeout: for a request's head, and for each part of an answer to leave
    admin_allowed_hosts: tuple[str, ...] = ()  # admin.allowedHosts: names a request's Host may give besides the server's own
    console_enabled: bool = True  # admin.console.enabled: the read-only web console at /console
    console_address: str = "127.0.0.1"  # admin.console.address: it answers requests arriving here only
    console_auth: str | None = None  # admin.console.auth: user:base64(sha1(user:password)), asked by HTTP Basic
    ttl_enabled: bool = True
    container_check_interval_ms: int = 60_000
    super_digest: str | None = None
    skip_acl: bool = False  # skipACL (ZooKeeper's zookeeper.skipACL): every session may do anything
    outstanding_requests_max: int = 1000
    request_ops_max: int = 5_000  # maxRequestOps: ops in one multi or multiRead
    sessions_max: int = 100_000  # maxSessions: sessions open at once (zabby); the leader refuses a createSession past it
    sessions_per_host_max: int = 2_000  # maxSessionsPerHost: sessions open that a server made for one source (zabby)
    connection_outstanding_max: int = 500  # clientOutstandingLimit: requests in flight per connection before it is not read
    client_memory_budget_bytes: int = 256 * 2**20  # clientMemoryBudget: what all client connections may hold (zabby.server.clients.budget)
    connection_memory_bytes_max: int = 32 * 2**20  # clientConnectionMemoryMax: what one may hold before it is closed
    commit_log_count: int = 500
    watch_history_txns: int = 100_000  # watchHistoryTxns: txns whose events a watch may resume over (zabby)
    watch_list_max: int = 10_000  # watchListMax: watches wchc, wchp and the console list at most (zabby)
    zxid_counter_last: int = ZXID_COUNTER_LAST  # zxidCounterLast: lower only in tests, to make epochs roll over soon
    force_sync: bool = True
    leader_serves: bool = True
    observer_sync_enabled: bool = True
    log_reserve_bytes: int = 64 * 2**20  # preAllocSize (KB): log space kept allocated ahead
    digest_enabled: bool = True  # digest.enabled: learners check their tree against the leader's
    read_only_enabled: bool = False  # readonlymode.enabled: serve reads while cut off from a quorum
    reconfig_enabled: bool = False  # reconfigEnabled: the reconfig operation (off, as ZooKeeper's)
    dynamic_config_file: Path | None = None  # dynamicConfigFile: where the server.N lines live
    membership_version: int = 0  # the dynamic file's version= (0: a static configuration)
    source: Path | None = None  # the zoo.cfg this came from (a reconfig rewrites its dynamicConfigFile)
    initial_text: str = ""  # that file's text at start (the admin's initial_configuration)
    peers: tuple[PeerAddress, ...] = ()
    server_id: int = 0
    quorum_protocol: str = ZABBY_PROTOCOL  # quorum.protocol: what the peer ports speak, zabby's or ZooKeeper 3.8's
    quorum_bridge: bool = False  # quorum.protocol.bridge: the peer ports take the other protocol too (a rolling switch)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def membership(self) -> Membership | None:
        """The server.N lines as a membership (None for a standalone server)."""
        return Membership.of(self.peers, self.membership_version) if self.peers else None

    @property
    def zookeeper_peers(self) -> bool:
        """Whether a peer may speak ZooKeeper's protocol with this server: then what that
        protocol cannot carry (a session's password, zabby's LOGGED) is done ZooKeeper's way."""
        return self.quorum_protocol == ZOOKEEPER_PROTOCOL or self.quorum_bridge

    @property
    def standalone(self) -> bool:
        return len([p for p in self.peers if not p.observer]) <= 1


# The largest txn any setting allows: a quarter of the largest record, so that a znode (its
# data and its ACL, each at most a txn's) fits a snapshot record, and a SNAP chunk of 4 MiB
# plus its last znode a member's frame.
TXN_BYTES_CEILING = RECORD_BYTES_MAX // 4


def _txn_limits(raw: dict[str, str]) -> tuple[int, int]:
    """``jute.maxbuffer`` (a request's bytes) and ``maxTxnBytes`` (its txn's, after the
    ``auth`` ACL is expanded into the session's ids and a multi's ops are joined): twice the
    first by default, at least it and at most ``TXN_BYTES_CEILING``."""
    jute = _int(raw, "jute.maxbuffer", 0xFFFFF, 1024)
    if jute > TXN_BYTES_CEILING - 1024:
        raise ConfigError(f"jute.maxbuffer={jute} must be at most {TXN_BYTES_CEILING - 1024}")
    txn = _int(raw, "maxTxnBytes", min(2 * (jute + 1), TXN_BYTES_CEILING), jute + 1024)
    if txn > TXN_BYTES_CEILING:
        raise ConfigError(f"maxTxnBytes={txn} must be at most {TXN_BYTES_CEILING}: the log, peers and snapshots refuse larger records")
    return jute, txn


def _int(raw: dict[str, str], key: str, default: int, minimum: int = 0) -> int:
    text = raw.pop(key, None)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{key}={text!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"{key}={value} must be at least {minimum}")
    return value


def _zxid_counter_last(raw: dict[str, str]) -> int:
    value = _int(raw, "zxidCounterLast", ZXID_COUNTER_LAST, 2)
    if value > ZXID_COUNTER_LAST:
        raise ConfigError(f"zxidCounterLast={value} must be at most {ZXID_COUNTER_LAST} (0x{ZXID_COUNTER_LAST:x})")
    return value


def _bool(raw: dict[str, str], key: str, default: bool) -> bool:
    text = raw.pop(key, None)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise ConfigError(f"{key}={text!r} is not a boolean")


def _pop(raw: dict[str, str], key: str) -> str | None:
    """A key as zoo.cfg spells it, or with ZooKeeper's ``zookeeper.`` system-property prefix."""
    value = raw.pop(key, None)
    prefixed = raw.pop("zookeeper." + key, None)
    return value if value is not None else prefixed


def _prefixed_bool(raw: dict[str, str], key: str, default: bool) -> bool:
    """``_bool`` of a key as zoo.cfg spells it, or with the ``zookeeper.`` prefix (``_pop``)."""
    value = _pop(raw, key)
    return default if value is None else _bool({key: value}, key, default)


def _tls(raw: dict[str, str], prefix: str, base: Path) -> TlsConfig:
    """The ``{prefix}keyStore.location``… keys (prefix ``ssl.`` or ``ssl.quorum.``)."""
    location = _pop(raw, prefix + "keyStore.location")
    if not location:
        raise ConfigError(f"{prefix}keyStore.location is required for TLS (a PEM file with the key and certificate)")
    trust = _pop(raw, prefix + "trustStore.location")
    for kind, path in (("keyStore", location), ("trustStore", trust)):
        store_type = (_pop(raw, f"{prefix}{kind}.type") or "").strip().upper()
        if store_type not in ("", "PEM") or (path and not store_type and not path.lower().endswith((".pem", ".crt", ".key"))):
            raise ConfigError(f"{prefix}{kind}.type={store_type or '(from the file name)'}: zabby reads PEM files only "
                              f"(set {prefix}{kind}.type=PEM; convert JKS/PKCS12 with keytool and openssl)")  # fmt: skip
    _pop(raw, prefix + "trustStore.password")  # a PEM trust store is not encrypted
    client_auth = (_pop(raw, prefix + "clientAuth") or "need").strip().lower()
    if client_auth not in CLIENT_AUTH_MODES:
        raise ConfigError(f"{prefix}clientAuth={client_auth!r}: expected one of {', '.join(CLIENT_AUTH_MODES)}")
    return TlsConfig(
        key_store=(base / location).resolve(),
        key_store_password=_pop(raw, prefix + "keyStore.password") or None,
        trust_store=(base / trust).resolve() if trust else None,
        client_auth=client_auth,
        hostname_verification=_bool(raw, prefix + "hostnameVerification", True),
        protocols=_protocols(raw, prefix),
        ciphers=_pop(raw, prefix + "ciphersuites") or None,
    )


def _protocols(raw: dict[str, str], prefix: str) -> tuple[str, ...]:
    protocol = _pop(raw, prefix + "protocol")
    enabled = _pop(raw, prefix + "enabledProtocols")
    names = [name.strip() for name in (enabled or protocol or ",".join(TLS_PROTOCOLS)).split(",") if name.strip()]
    unknown = [name for name in names if name not in TLS_PROTOCOLS]
    if unknown or not names:
        raise ConfigError(f"{prefix}enabledProtocols: {', '.join(unknown) or 'none'}: zabby speaks {' and '.join(TLS_PROTOCOLS)}")
    return tuple(sorted(set(names)))


def _whitelist(text: str | None) -> frozenset[str]:
    if text is None:
        return DEFAULT_4LW_WHITELIST
    words = {w.strip() for w in text.split(",") if w.strip()}
    if "*" in words:
        return ALL_4LW
    unknown = words - ALL_4LW
    if unknown:
        LOGGER.warning("4lw.commands.whitelist names unknown words %s", sorted(unknown))
    return frozenset(words & ALL_4LW)


def _digest_user(text: str | None) -> str | None:
    """``user:base64(sha1(user:password))``, ZooKeeper's digest form (``zabby.tree.acl.digest``)."""
    if text is None:
        return None
    user, _, encoded = text.strip().partition(":")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raw = b""
    if not user or len(raw) != hashlib.sha1().digest_size:
        raise ConfigError(f"admin.console.auth={text!r}: expected user:base64(sha1(user:password)), "
                          "as `zabby-admin digest user:password` prints it")  # fmt: skip
    return f"{user}:{encoded}"


def _peer(key: str, value: str) -> PeerAddress:
    try:
        return parse_member(key, value)
    except MembershipError as exc:
        raise ConfigError(str(exc)) from None


def parse_lines(text: str) -> dict[str, str]:
    raw: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"line {number}: expected key=value, got {line!r}")
        raw[key.strip()] = value.strip()
    return raw


def load(path: str | Path) -> ServerConfig:
    """Read a zoo.cfg file; relative dataDir/dataLogDir are relative to the file's folder."""
    config_path = Path(path)
    try:
        text = config_path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {config_path}: {exc}") from None
    config = from_dict(parse_lines(text), base=config_path.resolve().parent)
    return dataclasses.replace(config, source=config_path.resolve(), initial_text=text)


def from_dict(raw: dict[str, str], base: Path = Path(".")) -> ServerConfig:  # noqa: PLR0915
    raw = dict(raw)
    if "dataDir" not in raw:
        raise ConfigError("dataDir is required")
    data_dir = (base / raw.pop("dataDir")).resolve()
    data_log_dir = (base / raw.pop("dataLogDir")).resolve() if "dataLogDir" in raw else data_dir
    tick_ms = _int(raw, "tickTime", 2000, 1)
    dynamic_file, membership_version = _dynamic_config(raw, base)
    peers = tuple(sorted((_peer(k, raw.pop(k)) for k in list(raw) if k.startswith("server.")), key=lambda p: p.sid))
    jute_bytes_max, txn_bytes_max = _txn_limits(raw)
    session_timeout_ms_min = _int(raw, "minSessionTimeout", 2 * tick_ms, 1)
    acl_entries_max = _int(raw, "maxAclEntries", 256, 1)
    txn_acl_entries_max = _int(raw, "maxTxnAclEntries", 8192, 1)
    if txn_acl_entries_max < acl_entries_max:
        raise ConfigError(f"maxTxnAclEntries={txn_acl_entries_max} must be at least maxAclEntries ({acl_entries_max}): "
                          f"a create with the largest ACL would be refused")  # fmt: skip
    config = ServerConfig(
        data_dir=data_dir,
        data_log_dir=data_log_dir,
        client_port=_client_port(raw),
        client_port_address=raw.pop("clientPortAddress", "0.0.0.0"),
        tick_ms=tick_ms,
        init_limit_ticks=_int(raw, "initLimit", 10, 1),
        sync_limit_ticks=_int(raw, "syncLimit", 5, 1),
        session_timeout_ms_min=session_timeout_ms_min,
        session_timeout_ms_max=_int(raw, "maxSessionTimeout", 20 * tick_ms, 1),
        election_client_hold_ms=_election_client_hold_ms(raw, tick_ms, session_timeout_ms_min),
        client_connections_per_ip_max=_int(raw, "maxClientCnxns", 60),
        client_connections_max=_int(raw, "maxCnxns", 0),
        descriptor_reserve=_int(raw, "descriptorReserve", 64, 16),
        snap_count=_int(raw, "snapCount", 100_000, 2),
        snap_retain_count=max(3, _int(raw, "autopurge.snapRetainCount", 3)),
        purge_interval_hours=float(raw.pop("autopurge.purgeInterval", "1")),
        four_letter_words=_whitelist(raw.pop("4lw.commands.whitelist", None)),
        jute_buffer_bytes_max=jute_bytes_max,
        txn_bytes_max=txn_bytes_max,
        auth_ids_max=_int(raw, "maxAuthIds", 32, 1),
        acl_entries_max=acl_entries_max,
        txn_acl_entries_max=txn_acl_entries_max,
        znodes_max=_int(raw, "maxZnodes", 10_000_000, 16),
        tree_bytes_max=_int(raw, "maxTreeBytes", 4 * 2**30, 4096),
        watch_history_bytes=_int(raw, "watchHistoryBytes", 64 * 2**20, 0),
        jute_enabled=_bool(raw, "juteEnabled", True),
        admin_enabled=_bool(raw, "admin.enableServer", True),
        admin_address=raw.pop("admin.serverAddress", "0.0.0.0"),
        admin_port=_int(raw, "admin.serverPort", 8080),
        admin_command_url=raw.pop("admin.commandURL", "/commands"),
        admin_connections_max=_int(raw, "admin.maxConnections", 32, 1),
        admin_connections_per_host_max=_int(raw, "admin.maxConnectionsPerHost", 8, 1),
        admin_idle_timeout_ms=_int(raw, "admin.idleTimeout", 2000, 1),
        admin_allowed_hosts=tuple(name.strip() for name in raw.pop("admin.allowedHosts", "").split(",") if name.strip()),
        console_enabled=_bool(raw, "admin.console.enabled", True),
        console_address=raw.pop("admin.console.address", "127.0.0.1"),
        console_auth=_digest_user(raw.pop("admin.console.auth", None)),
        ttl_enabled=_bool(raw, "extendedTypesEnabled", True),
        container_check_interval_ms=_int(raw, "znode.container.checkIntervalMs", 60_000, 1),
        super_digest=raw.pop("superDigest", None),
        skip_acl=_bool(raw, "skipACL", False),
        outstanding_requests_max=_int(raw, "globalOutstandingLimit", 1000, 1),
        request_ops_max=_int(raw, "maxRequestOps", 5_000, 1),
        sessions_max=_int(raw, "maxSessions", 100_000, 1),
        sessions_per_host_max=_int(raw, "maxSessionsPerHost", 2_000, 1),
        connection_outstanding_max=_int(raw, "clientOutstandingLimit", 500, 1),
        client_memory_budget_bytes=_int(raw, "clientMemoryBudget", 256 * 2**20, 1),
        connection_memory_bytes_max=_int(raw, "clientConnectionMemoryMax", 32 * 2**20, 1),
        commit_log_count=_int(raw, "commitLogCount", 500, 0),
        watch_history_txns=_int(raw, "watchHistoryTxns", 100_000, 0),
        watch_list_max=_int(raw, "watchListMax", 10_000, 1),
        zxid_counter_last=_zxid_counter_last(raw),
        force_sync=_bool(raw, "forceSync", True),
        leader_serves=_bool(raw, "leaderServes", True),
        observer_sync_enabled=_bool(raw, "syncEnabled", True),
        log_reserve_bytes=_int(raw, "preAllocSize", 65536) * 1024,
        digest_enabled=_bool(raw, "digest.enabled", True),
        read_only_enabled=_bool(raw, "readonlymode.enabled", False),
        reconfig_enabled=_bool(raw, "reconfigEnabled", False),
        dynamic_config_file=dynamic_file,
        membership_version=membership_version,
        peers=peers,
    )
    config = _with_security(config, raw, base)
    config = _with_quorum_protocol(config, raw)
    election_alg = raw.pop("electionAlg", "3")
    if election_alg.strip() != "3":
        raise ConfigError(f"electionAlg={election_alg}: only 3 (fast leader election) exists")
    raw.pop("peerType", None)
    if config.session_timeout_ms_min > config.session_timeout_ms_max:
        raise ConfigError("minSessionTimeout must not exceed maxSessionTimeout")
    _check_client_memory(config)
    myid = _read_myid(data_dir)
    if myid is not None:
        config = dataclasses.replace(config, server_id=myid)
    if peers and (myid is None or myid not in {p.sid for p in peers}):
        raise ConfigError(
            f"{data_dir / 'myid'} must hold this server's id, one of the server.N lines "
            f"({', '.join(str(p.sid) for p in peers)}); found {myid!r}"
        )
    for key in raw:
        LOGGER.info("config key %s is not used by zabby", key)
    return dataclasses.replace(config, extra=raw)


def _with_quorum_protocol(config: ServerConfig, raw: dict[str, str]) -> ServerConfig:
    """``quorum.protocol``: ``zookeeper`` makes the peer ports speak ZooKeeper 3.8's protocol,
    so that ZooKeeper servers and zabby servers make one ensemble (docs/operations.md).
    ``quorum.protocol.bridge=true``: the ports take both protocols, and each peer is answered
    in the one it speaks (``zabby.server.peering.bridge``), so that an ensemble switches
    protocol by a rolling restart with every server serving.  What only zabby's protocol has
    is refused with either."""
    protocol = raw.pop("quorum.protocol", ZABBY_PROTOCOL).strip().lower()
    if protocol not in QUORUM_PROTOCOLS:
        raise ConfigError(f"quorum.protocol={protocol}: one of {', '.join(QUORUM_PROTOCOLS)}")
    bridge = _bool(raw, "quorum.protocol.bridge", False)
    if protocol == ZOOKEEPER_PROTOCOL or bridge:
        setting = "quorum.protocol.bridge=true" if bridge else "quorum.protocol=zookeeper"
        for on, key in ((config.quorum_tls, "sslQuorum"), (config.quorum_auth, "quorum.auth.enabled"), (config.reconfig_enabled, "reconfigEnabled")):
            if on:
                raise ConfigError(f"{setting} does not go with {key}=true: zabby speaks ZooKeeper's peer "
                                  f"protocol in plain text, without reconfig")  # fmt: skip
    return dataclasses.replace(config, quorum_protocol=protocol, quorum_bridge=bridge)


def _election_client_hold_ms(raw: dict[str, str], tick_ms: int, session_timeout_ms_min: int) -> int:
    """``electionClientHoldMs``: a server that stops serving (its leader is gone, it lost its
    quorum) keeps the connections of idle clients this long, so that an election shorter
    than it passes them by without a disconnection; then it closes them, and they move to a
    server that serves.  At most half the shortest session timeout: a client held on a server
    cut off from the quorum must still reach one in time to keep its session."""
    most = session_timeout_ms_min // 2
    hold_ms = _int(raw, "electionClientHoldMs", min(tick_ms, most), 0)
    if hold_ms > most:
        raise ConfigError(f"electionClientHoldMs={hold_ms} is more than half of minSessionTimeout ({session_timeout_ms_min} ms): a client "
                          f"held that long on a server cut off from the quorum could lose its session")  # fmt: skip
    return hold_ms


def _check_client_memory(config: ServerConfig) -> None:
    """A connection must be able to hold a request and its reply, and the budget one connection."""
    least = 3 * config.jute_buffer_bytes_max
    if config.connection_memory_bytes_max < least:
        raise ConfigError(f"clientConnectionMemoryMax={config.connection_memory_bytes_max} is too small: a connection holds a "
                          f"request and its reply, so it must be at least 3 x jute.maxbuffer ({least})")  # fmt: skip
    if config.client_memory_budget_bytes < config.connection_memory_bytes_max:
        raise ConfigError(f"clientMemoryBudget={config.client_memory_budget_bytes} must be at least "
                          f"clientConnectionMemoryMax ({config.connection_memory_bytes_max})")  # fmt: skip


def _dynamic_config(raw: dict[str, str], base: Path) -> tuple[Path | None, int]:
    """ZooKeeper's dynamicConfigFile: its server.N lines join ``raw``; its version= is the
    membership's version."""
    name = raw.pop("dynamicConfigFile", None)
    if name is None:
        return None, 0
    path = (base / name).resolve()
    try:
        dynamic = parse_lines(path.read_text())
    except OSError as exc:
        raise ConfigError(f"dynamicConfigFile {path}: {exc}") from None
    version_text = dynamic.pop("version", "0")
    try:
        version = int(version_text, 16)
    except ValueError:
        raise ConfigError(f"{path}: version={version_text!r} is not hexadecimal") from None
    for key, value in dynamic.items():
        if not key.startswith("server."):
            raise ConfigError(f"{path}: only server.N lines and version= belong in a dynamic configuration, not {key}")
        raw[key] = value
    return path, version


def write_dynamic_config(config: ServerConfig, membership: Membership) -> Path:
    """A committed reconfig's membership, where a restart reads it.  With a dynamicConfigFile,
    that file is replaced (atomically, in its own folder): zoo.cfg is not touched, so it may
    live where the server cannot write (docs/operations.md, *Installing under systemd*).
    Without one, ``<zoo.cfg>.dynamic.<version>`` is written beside zoo.cfg and zoo.cfg is
    rewritten to name it, as ZooKeeper rewrites its files.  Either way each file is written
    atomically, so a restart reads one membership or the other."""
    from zabby.storage.files import write_atomically

    source = config.source
    if source is None:
        raise ConfigError("no zoo.cfg to record the new membership in")
    content = (membership.text() + "\n").encode()
    if config.dynamic_config_file is not None:
        write_atomically(config.dynamic_config_file, content)
        return config.dynamic_config_file
    target = source.with_name(f"{source.name}.dynamic.{membership.version:x}")
    write_atomically(target, content)
    lines = [line for line in source.read_text().splitlines()
             if not line.strip().startswith(("server.", "dynamicConfigFile"))]  # fmt: skip
    lines.append(f"dynamicConfigFile={target.name}")
    write_atomically(source, ("\n".join(lines) + "\n").encode())
    return target


def membership_folders(config: ServerConfig) -> list[Path]:
    """The folders a committed reconfig writes in (``write_dynamic_config``)."""
    if config.source is None:
        return []
    if config.dynamic_config_file is not None:
        return [config.dynamic_config_file.parent]
    return [config.source.parent]


def check_membership_writable(config: ServerConfig) -> None:
    """With reconfigEnabled, the folders a committed reconfig writes in must be writable: a
    server that cannot record the membership it committed would restart with the old one.

    Raises:
        ConfigError: naming the folder, and the way out.
    """
    if not config.reconfig_enabled or not config.peers:
        return
    for folder in membership_folders(config):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(f"reconfigEnabled=true but {folder} is not writable, and a committed reconfig writes the "
                              f"membership there: name a dynamicConfigFile in a folder the server may write (its dataDir, "
                              f"say; docs/operations.md, Installing under systemd), or make {folder} writable")  # fmt: skip


def _client_port(raw: dict[str, str]) -> int | None:
    """clientPort; ZooKeeper's default 2181, unless only a secureClientPort is given."""
    if "clientPort" not in raw and "secureClientPort" in raw:
        return None
    return _int(raw, "clientPort", 2181)


def _with_security(config: ServerConfig, raw: dict[str, str], base: Path) -> ServerConfig:
    """The secure client port, TLS on the quorum links and quota enforcement."""
    secure_port = _int(raw, "secureClientPort", -1)
    client_tls = _tls(raw, "ssl.", base) if secure_port >= 0 else None
    quorum_tls = _tls(raw, "ssl.quorum.", base) if _bool(raw, "sslQuorum", False) else None
    quorum_auth = _quorum_auth(raw, base)
    raw.pop("serverCnxnFactory", None)  # ZooKeeper needs Netty's for TLS; zabby has one kind
    sasl_users, sasl_acls = _sasl(raw, base)
    return dataclasses.replace(
        config,
        sasl_users=sasl_users,
        sasl_acls=sasl_acls,
        sasl_super_user=_pop(raw, "superUser"),
        enforce_auth_schemes=_enforced_schemes(raw, sasl_acls),
        secure_client_port=secure_port if secure_port >= 0 else None,
        secure_client_port_address=raw.pop("secureClientPortAddress", config.client_port_address),
        client_tls=client_tls,
        quorum_tls=quorum_tls,
        quorum_auth=quorum_auth,
        enforce_quota=_prefixed_bool(raw, "enforceQuota", False),
        peer_links=PeerLinkLimits(
            unidentified_max=_int(raw, "quorum.unidentifiedLinksMax", 32, 1),
            unidentified_per_host_max=_int(raw, "quorum.unidentifiedLinksPerHost", 4, 1),
            member_host_max=_int(raw, "quorum.memberHostLinksMax", 8, 2),
        ),
    )


SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"


def _sasl(raw: dict[str, str], base: Path) -> tuple[dict[str, str] | None, bool]:
    """``sasl.jaasConfig`` (a JAAS file: its ``sasl.serverSection``, default Server, gives the
    DIGEST-MD5 users, as ZooKeeper's DigestLoginModule takes them) and ZooKeeper's
    ``authProvider.N`` / ``authProvider.sasl`` naming its SASL provider: (users, "sasl" ACLs)."""
    from zabby.sasl import JaasError, load_users

    providers = [raw.pop(key) for key in list(raw) if key.startswith(("authProvider.", "zookeeper.authProvider."))]
    unknown = [p for p in providers if p.strip() != SASL_PROVIDER]
    if unknown:
        raise ConfigError(f"authProvider {', '.join(unknown)}: zabby has ip, digest and SASL ({SASL_PROVIDER}) only")
    name = raw.pop("sasl.jaasConfig", None)
    section = raw.pop("sasl.serverSection", "Server")
    users = None
    if name is not None:
        try:
            users = load_users((base / name).resolve(), section)
        except JaasError as exc:
            raise ConfigError(f"sasl.jaasConfig: {exc}") from None
    return users, users is not None or bool(providers)


def _enforced_schemes(raw: dict[str, str], sasl: bool) -> frozenset[str]:
    """ZooKeeper's ``enforce.auth.enabled`` + ``enforce.auth.schemes``, and its older
    ``sessionRequireClientSASLAuth=true`` / ``requireClientAuthScheme=sasl`` (sasl alone)."""
    enabled = _prefixed_bool(raw, "enforce.auth.enabled", False)
    schemes = _pop(raw, "enforce.auth.schemes")
    require_sasl = _prefixed_bool(raw, "sessionRequireClientSASLAuth", False)
    required_scheme = _pop(raw, "requireClientAuthScheme")
    if require_sasl or (required_scheme or "").strip() == "sasl":
        chosen = frozenset({"sasl"})
    elif enabled:
        if not schemes:
            raise ConfigError("enforce.auth.enabled=true needs enforce.auth.schemes (e.g. sasl, or digest)")
        chosen = frozenset(scheme.strip() for scheme in schemes.split(",") if scheme.strip())
    else:
        return frozenset()
    known = {"digest"} | ({"sasl"} if sasl else set())
    if not chosen <= known:
        raise ConfigError(f"enforced auth scheme(s) {', '.join(sorted(chosen - known))} not available here "
                          f"(digest; sasl once sasl.jaasConfig or a SASL authProvider is set)")  # fmt: skip
    return chosen


QUORUM_SECRET_BYTES_MIN = 16


def _quorum_auth(raw: dict[str, str], base: Path) -> QuorumAuth | None:
    """``quorum.auth.enabled``, ``quorum.auth.secretFile`` (its bytes, whitespace at the ends
    cut, at least 16) and ``quorum.auth.required`` (default true)."""
    enabled = _bool(raw, "quorum.auth.enabled", False)
    name = raw.pop("quorum.auth.secretFile", None)
    required = _bool(raw, "quorum.auth.required", True)
    if not enabled:
        return None
    if name is None:
        raise ConfigError("quorum.auth.enabled=true needs quorum.auth.secretFile: a file of the secret every server of the ensemble holds")
    path = (base / name).resolve()
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"quorum.auth.secretFile {path}: {exc}") from None
    if len(secret) < QUORUM_SECRET_BYTES_MIN:
        raise ConfigError(f"quorum.auth.secretFile {path}: the secret must be at least {QUORUM_SECRET_BYTES_MIN} bytes (e.g. head -c 32 /dev/urandom | base64)")
    return QuorumAuth(secret, required)


def _read_myid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "myid").read_text().strip())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------- client properties
@dataclass(frozen=True, slots=True)
class ClientConfig:
    """A ZooKeeper client-configuration file (zkCli's ``-client-configuration``), as far as
    zabby's client uses it: TLS.  Keys are ZooKeeper's client properties."""

    secure: bool = False  # zookeeper.client.secure
    key_store: Path | None = None  # zookeeper.ssl.keyStore.location: PEM key and certificate
    key_store_password: str | None = None  # zookeeper.ssl.keyStore.password
    trust_store: Path | None = None  # zookeeper.ssl.trustStore.location: PEM CA certificates
    hostname_verification: bool = True  # zookeeper.ssl.hostnameVerification (ZooKeeper's default)

    def client_options(self) -> dict[str, object]:
        """The arguments of ``zabby.Client``/``SyncClient`` (kazoo's names) these settings mean."""
        if not self.secure:
            return {}
        return {
            "use_ssl": True,
            "certfile": str(self.key_store) if self.key_store else None,
            "keyfile_password": self.key_store_password,
            "ca": str(self.trust_store) if self.trust_store else None,
            "check_hostname": self.hostname_verification,
        }


def parse_properties(text: str) -> dict[str, str]:
    """Java's ``.properties`` lines: ``key=value``, ``key: value`` or ``key value``; ``#`` and
    ``!`` comments (line continuations are not needed by any key zabby reads)."""
    raw: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":"), line.find(" ")) if i >= 0), default=len(line))
        raw[line[:cut].strip()] = line[cut + 1 :].strip()
    return raw


def load_client_configuration(path: str | Path) -> ClientConfig:
    """Read a client-configuration file; relative store paths are relative to its folder."""
    config_path = Path(path)
    try:
        raw = parse_properties(config_path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read client configuration {config_path}: {exc}") from None
    base = config_path.resolve().parent
    for kind in ("keyStore", "trustStore"):
        store_type = raw.get(f"zookeeper.ssl.{kind}.type", "PEM").strip().upper()
        if store_type != "PEM":
            raise ConfigError(f"zookeeper.ssl.{kind}.type={store_type}: zabby reads PEM files only")
    key_store, trust_store = raw.get("zookeeper.ssl.keyStore.location"), raw.get("zookeeper.ssl.trustStore.location")
    return ClientConfig(
        secure=_bool(raw, "zookeeper.client.secure", False),
        key_store=(base / key_store).resolve() if key_store else None,
        key_store_password=raw.get("zookeeper.ssl.keyStore.password") or None,
        trust_store=(base / trust_store).resolve() if trust_store else None,
        hostname_verification=_bool(raw, "zookeeper.ssl.hostnameVerification", True),
    )
