"""``zabby-admin``: snapshots and txn logs, for operators.

    zabby-admin snapshot save FILE --server HOST:PORT [--auth USER:PASSWORD]
    zabby-admin snapshot restore FILE --data-dir DIR --myid N [--data-log-dir DIR] [--force]
    zabby-admin snapshot status FILE [--json]
    zabby-admin snapshot compare A B [--limit N] [--bytes B] [--nodes N]
    zabby-admin log dump DIR [--from ZXID] [--json]
    zabby-admin log verify DIR
    zabby-admin log chop DIR --to ZXID [--backup DIR] [--data-dir DIR] [--dry-run]
    zabby-admin zookeeper import ZK_DATA_DIR --data-dir DIR --myid N [--zk-data-log-dir DIR] [--force]
    zabby-admin zookeeper export DATA_DIR|SNAPSHOT --out ZK_DATA_DIR [--myid N] [--force]
    zabby-admin zookeeper export --server HOST:PORT [--auth USER:PASSWORD] --out ZK_DATA_DIR [--myid N]
    zabby-admin kylin backup DIR --hosts HOSTS --project P
    zabby-admin kylin restore DIR --hosts HOSTS [--project P] [--replace]
    zabby-admin digest USER:PASSWORD      (for superDigest and admin.console.auth)

Exit status: 0 success; 1 bad data (a corrupt or mismatching file, a log that fails
verification, snapshots that differ); 2 bad input (arguments, a missing file or folder, a
data dir that is not empty); 3 the server (unreachable, refused, not a zabby endpoint).
Errors go to stderr as one line: ``zabby-admin: <what and why>``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from zabby.ops import compare as comparer
from zabby.ops import fetch, logtool, restore, snapfile, zk_export, zk_import
from zabby.ops.errors import AdminError, ServerError, UsageError, parse_zxid
from zabby.ops.txnformat import format_text, txn_to_dict
from zabby.tree import acl

PROG = "zabby-admin"
USAGE_EXIT = 2


def _zxid(text: str) -> int:
    try:
        return parse_zxid(text)
    except AdminError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _snapshot_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = commands.add_parser("snapshot", help="save, restore, inspect and compare snapshot files")
    sub = snapshot.add_subparsers(dest="action", required=True, metavar="ACTION")
    save = sub.add_parser("save", help="stream a consistent snapshot from a live server, checked against its digest")
    save.add_argument("file", type=Path)
    save.add_argument("--server", required=True, metavar="HOST:PORT", help="the server's admin endpoint (admin.serverPort)")
    save.add_argument("--auth", metavar="USER:PASSWORD", help="credentials when the server sets admin.console.auth")
    save.add_argument("--command-url", default="/commands", help="the server's admin.commandURL (default %(default)s)")
    save.add_argument("--timeout", type=float, default=120.0, metavar="S", help="socket timeout in seconds (default %(default)s)")
    save.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    rest = sub.add_parser("restore", help="seed a server's data dir from a snapshot (every server of a new ensemble: the same file)")
    rest.add_argument("file", type=Path)
    rest.add_argument("--data-dir", type=Path, required=True, help="the server's dataDir")
    rest.add_argument("--data-log-dir", type=Path, help="the server's dataLogDir, if it differs")
    rest.add_argument("--myid", type=int, required=True, help="the server's id (its server.N line)")
    rest.add_argument("--force", action="store_true", help="move an existing history aside (version-2.before-restore-*)")
    stat = sub.add_parser("status", help="zxid, znode count, size and digest of a snapshot file")
    stat.add_argument("file", type=Path)
    stat.add_argument("--json", action="store_true")
    comp = sub.add_parser("compare", help="the first differences between two snapshots (ZooKeeper's SnapshotComparer)")
    comp.add_argument("left", type=Path)
    comp.add_argument("right", type=Path)
    comp.add_argument("--limit", type=int, default=20, help="differences shown (0: all; default %(default)s)")
    comp.add_argument("--bytes", type=int, default=0, help="only size deltas above this many bytes (SnapshotComparer -b)")
    comp.add_argument("--nodes", type=int, default=0, help="only descendant-count deltas above this (SnapshotComparer -n)")


def _log_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    log = commands.add_parser("log", help="dump, verify and chop a txn log")
    sub = log.add_subparsers(dest="action", required=True, metavar="ACTION")
    dump = sub.add_parser("dump", help="every txn, readable")
    dump.add_argument("dir", type=Path, help="dataLogDir (or its version-2 folder)")
    dump.add_argument("--from", dest="from_zxid", type=_zxid, default=0, metavar="ZXID", help="start at this zxid (0x… or decimal)")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
    verify = sub.add_parser("verify", help="check CRCs, zxid order and txn gaps")
    verify.add_argument("dir", type=Path)
    chop = sub.add_parser("chop", help="cut every txn after ZXID (last resort), keeping a backup of what it cuts")
    chop.add_argument("dir", type=Path)
    chop.add_argument("--to", dest="to_zxid", type=_zxid, required=True, metavar="ZXID", help="the last txn kept")
    chop.add_argument("--backup", type=Path, help="backup folder (default: chop-backup-<time>-to-<zxid> beside version-2)")
    chop.add_argument("--data-dir", type=Path, help="dataDir, when the log is in a separate dataLogDir (snapshots past ZXID move too)")
    chop.add_argument("--dry-run", action="store_true", help="say what would be cut, change nothing")


def _zookeeper_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    zookeeper = commands.add_parser("zookeeper", help="move a ZooKeeper deployment onto zabby and back: its data dir converted exactly")
    sub = zookeeper.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = sub.add_parser("import", help="a ZooKeeper 3.5-3.9 data dir (snapshots and txn logs) as a zabby data dir")
    imp.add_argument("zk_data_dir", type=Path, metavar="ZK_DATA_DIR", help="ZooKeeper's dataDir (or its version-2 folder)")
    imp.add_argument("--zk-data-log-dir", type=Path, help="ZooKeeper's dataLogDir, if it is not its dataDir")
    imp.add_argument("--data-dir", type=Path, required=True, help="the zabby server's dataDir to write (absent or empty)")
    imp.add_argument("--myid", type=int, required=True, help="the zabby server's id (its server.N line)")
    imp.add_argument("--force", action="store_true", help="move a non-empty --data-dir aside (DIR.before-import-*)")
    exp = sub.add_parser("export", help="a zabby tree (a stopped server's data dir, a snapshot, a live server) as a ZooKeeper 3.8 data dir")
    exp.add_argument("source", type=Path, nargs="?", metavar="DATA_DIR", help="a stopped server's dataDir, or a zabby snapshot file")
    exp.add_argument("--server", metavar="HOST:PORT", help="stream a live server's snapshot instead (its admin endpoint, as snapshot save)")
    exp.add_argument("--auth", metavar="USER:PASSWORD", help="with --server: credentials when the server sets admin.console.auth")
    exp.add_argument("--out", type=Path, required=True, help="the ZooKeeper server's dataDir to write (absent or empty)")
    exp.add_argument("--myid", type=int, help="write dataDir/myid for this ZooKeeper server id (a quorum member)")
    exp.add_argument("--force", action="store_true", help="move a non-empty --out aside (DIR.before-export-*)")


def _kylin_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kylin = commands.add_parser("kylin", help="back up and restore a Spark job's /kylin/<project> metadata")
    sub = kylin.add_subparsers(dest="action", required=True, metavar="ACTION")
    backup = sub.add_parser("backup", help="the project's znodes as JSON files plus a manifest with the zxid")
    restore_ = sub.add_parser("restore", help="write a backup into an ensemble, under the project's epoch")
    for parser in (backup, restore_):
        parser.add_argument("dir", type=Path)
        parser.add_argument("--hosts", required=True, help="connect string host:port[,host:port...]")
        parser.add_argument("--root", default=None, help="metadata root (default /kylin; restore: the backup's)")
    backup.add_argument("--project", required=True)
    restore_.add_argument("--project", help="restore under another project name (default: the backup's)")
    restore_.add_argument("--replace", action="store_true", help="overwrite the project's metadata if it has some")
    restore_.add_argument("--epoch-timeout", type=float, default=30.0, metavar="S", help="wait this long for the project's epoch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _snapshot_parsers(commands)
    _log_parsers(commands)
    _zookeeper_parsers(commands)
    _kylin_parsers(commands)
    digest = commands.add_parser("digest", help="ZooKeeper's digest of user:password, for superDigest and admin.console.auth")
    digest.add_argument("credentials", metavar="USER:PASSWORD")
    return parser


# ----------------------------------------------------------------------------- commands
def _print_info(info: snapfile.SnapshotInfo, out: TextIO, as_json: bool = False) -> None:
    data = info.as_dict()
    if as_json:
        print(json.dumps(data), file=out)
        return
    for key, value in data.items():
        print(f"{key}: {value}", file=out)


def cmd_snapshot_save(args: argparse.Namespace, out: TextIO) -> int:
    result = fetch.save(args.server, args.file, auth=args.auth, command_url=args.command_url, timeout_s=args.timeout, force=args.force)
    _print_info(result.snapshot, out)
    print(f"saved in {result.seconds:.2f} s; CRC, zxid and digest match the server's", file=out)
    return 0


def cmd_snapshot_restore(args: argparse.Namespace, out: TextIO) -> int:
    result = restore.restore(args.file, args.data_dir, args.myid, data_log_dir=args.data_log_dir, force=args.force)
    for aside in result.moved_aside:
        print(f"moved the previous history aside: {aside}", file=out)
    if result.membership_dropped:
        print("left out the old ensemble's reconfigured membership (/zookeeper/config): this server's comes from its zoo.cfg", file=out)
    info = result.snapshot
    print(f"restored {info.znodes} znodes at zxid 0x{info.zxid:x} (digest 0x{info.digest:016x}) into {result.written}", file=out)
    print(f"myid {args.myid}, acceptedEpoch = currentEpoch = {result.epoch}: the ensemble's next leader starts epoch {result.epoch + 1}", file=out)
    return 0


def cmd_snapshot_status(args: argparse.Namespace, out: TextIO) -> int:
    _print_info(snapfile.status(args.file), out, args.json)
    return 0


def cmd_snapshot_compare(args: argparse.Namespace, out: TextIO) -> int:
    left, right = (comparer.tree_info(snapfile.load_tree(path)) for path in (args.left, args.right))
    for name, path, info in (("Left", args.left, left), ("Right", args.right, right)):
        print(f"{name}: {path}", file=out)
        print("\n".join(comparer.summary(info)), file=out)
    shown = 0
    for line in comparer.compare(left, right, args.bytes, args.nodes):
        if line.difference and args.limit and shown >= args.limit:
            print(f"Stopped after {shown} differences (--limit {args.limit}).", file=out)
            return 1
        shown += line.difference
        print(line.text, file=out)
    print("The snapshots are identical." if not shown else f"{shown} differences.", file=out)
    return 1 if shown else 0


def cmd_log_dump(args: argparse.Namespace, out: TextIO) -> int:
    for txn in logtool.dump(args.dir, args.from_zxid):
        record = txn_to_dict(txn)
        print(json.dumps(record) if args.json else format_text(record), file=out)
    return 0


def cmd_log_verify(args: argparse.Namespace, out: TextIO) -> int:
    report = logtool.verify(args.dir)
    for segment in report.segments:
        state = "ok" if segment.problem is None else "torn tail" if segment.torn_tail else "DAMAGED"
        print(f"{segment.path.name}: {segment.records} records, zxids 0x{segment.first_zxid:x}..0x{segment.last_zxid:x}, "
              f"{segment.file_bytes} bytes: {state}", file=out)  # fmt: skip
    for warning in report.warnings:
        print(f"warning: {warning} (a torn write: the server cuts it at start-up)", file=out)
    for error in report.errors:
        print(f"error: {error}", file=out)
    verdict = "OK" if report.ok else f"FAILED ({len(report.errors)} errors)"
    print(f"{verdict}: {report.records} records in {len(report.segments)} segments", file=out)
    return 0 if report.ok else 1


def cmd_log_chop(args: argparse.Namespace, out: TextIO) -> int:
    plan = logtool.plan_chop(args.dir, args.to_zxid, args.data_dir)
    if plan.empty:
        print(f"nothing to cut: no txn after 0x{args.to_zxid:x}", file=out)
        return 0
    if plan.damage is not None:
        print(f"note: a damaged record comes first: the log is cut after 0x{plan.last_kept_zxid:x} ({plan.damage})", file=out)
    what = [str(path) for path in plan.removed] + [str(path) for path in plan.snapshots]
    if plan.boundary is not None:
        what.append(f"{plan.boundary} (cut at byte {plan.cut_offset})")
    print(f"{'would cut' if args.dry_run else 'cutting'} after 0x{plan.last_kept_zxid:x}: " + ", ".join(what), file=out)
    if args.dry_run:
        return 0
    result = logtool.chop(plan, args.backup)
    print(f"cut {result.records_cut} txns; the files as they were and chopped.jsonl are in {result.backup_dir}", file=out)
    return 0


def cmd_zookeeper_import(args: argparse.Namespace, out: TextIO) -> int:
    report = zk_import.import_zookeeper(args.zk_data_dir, args.data_dir, args.myid, zk_log_dir=args.zk_data_log_dir, force=args.force)
    print("\n".join(zk_import.summary(report)), file=out)
    return 0


def cmd_zookeeper_export(args: argparse.Namespace, out: TextIO) -> int:
    if (args.source is None) == (args.server is None):
        raise UsageError("give either DATA_DIR (or a snapshot file) or --server")
    report = zk_export.export_zookeeper(args.source, args.out, server=args.server, auth=args.auth, myid=args.myid, force=args.force)
    print("\n".join(zk_export.summary(report)), file=out)
    return 0


def _kylin_client(hosts: str) -> Any:
    from zabby import SyncClient

    client = SyncClient(hosts, timeout=10.0)
    try:
        client.start(timeout=15)
    except Exception as exc:  # the client's own errors: timeout, connection refused
        client.close()
        raise ServerError(f"cannot connect to {hosts}: {type(exc).__name__}: {exc}") from None
    return client


def cmd_kylin(args: argparse.Namespace, out: TextIO) -> int:
    from zabby.spark.backup import BackupError, backup_project, restore_project
    from zabby.spark.epoch import EpochError
    from zabby.spark.model import DEFAULT_ROOT, Layout

    client = _kylin_client(args.hosts)
    try:
        if args.action == "backup":
            manifest = backup_project(client, Layout(args.project, args.root or DEFAULT_ROOT), args.dir)
            print(f"backed up {manifest.znodes} znodes ({manifest.data_bytes} bytes of data) of {args.project} "
                  f"at zxid 0x{manifest.zxid:x} into {args.dir}", file=out)  # fmt: skip
        else:
            layout = Layout(args.project, args.root or DEFAULT_ROOT) if args.project or args.root else None
            report = restore_project(client, args.dir, layout, replace=args.replace, epoch_timeout_s=args.epoch_timeout)
            print(f"restored {report.znodes} znodes of the backup at zxid 0x{report.zxid:x} into project {report.project} "
                  f"in {report.seconds:.2f} s (read back and compared)", file=out)  # fmt: skip
    except (BackupError, EpochError, ValueError) as exc:
        raise AdminError(str(exc)) from None
    finally:
        client.stop()
        client.close()
    return 0


def cmd_digest(args: argparse.Namespace, out: TextIO) -> int:
    user, sep, password = args.credentials.partition(":")
    if not sep or not user:
        raise UsageError("expected USER:PASSWORD")
    print(acl.digest(user, password), file=out)
    return 0


COMMANDS: dict[tuple[str, str | None], Callable[[argparse.Namespace, TextIO], int]] = {
    ("snapshot", "save"): cmd_snapshot_save,
    ("snapshot", "restore"): cmd_snapshot_restore,
    ("snapshot", "status"): cmd_snapshot_status,
    ("snapshot", "compare"): cmd_snapshot_compare,
    ("log", "dump"): cmd_log_dump,
    ("log", "verify"): cmd_log_verify,
    ("log", "chop"): cmd_log_chop,
    ("zookeeper", "import"): cmd_zookeeper_import,
    ("zookeeper", "export"): cmd_zookeeper_export,
    ("kylin", "backup"): cmd_kylin,
    ("kylin", "restore"): cmd_kylin,
    ("digest", None): cmd_digest,
}


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)  # bad arguments: usage on stderr, exit 2
    try:
        return COMMANDS[(args.command, getattr(args, "action", None))](args, out or sys.stdout)
    except AdminError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `zabby-admin log dump DIR | head`
        sys.stderr.close()
        return 0


def main_captured(argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)`` with what it prints caught: (exit code, stdout, stderr).  For harnesses
    that run ``zabby-admin`` in-process (the backup drill, the tests)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv, out=out)
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


if __name__ == "__main__":
    sys.exit(main())
