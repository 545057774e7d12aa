#!/usr/bin/env python3
"""Run kazoo's own test suite (the installed kazoo's ``kazoo.tests``) against zabby or against
Apache ZooKeeper 3.8 (Debian's jars), with kazoo's harness: a 3-server ensemble on 127.0.0.1,
its JAAS digest users (the SASL tests), a super digest, reconfig enabled.

    python scripts/kazoo_suite.py --system zabby              # the whole suite, on zabby
    python scripts/kazoo_suite.py --system zookeeper -k sasl  # pytest's -k, on ZooKeeper

Prints pytest's summary; ``--junit FILE`` keeps every test's outcome.  Needs java and
Debian's zookeeper package (scripts/install_zookeeper.sh, run when it is missing) for
ZooKeeper, and kazoo's test dependencies for both: ``pip install -e '.[kazoo-suite]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
JAVA_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest names most of its libraries; Netty's codec and resolver it leaves out
CLASSPATH = ":".join(str(JAVA_DIR / jar) for jar in ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar", "netty-codec.jar",
                                                      "netty-resolver.jar", "netty-transport-native-unix-common.jar"))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", choices=("zabby", "zookeeper"), default="zabby")
    parser.add_argument("-k", dest="keyword", help="pytest's -k: run the tests it selects")
    parser.add_argument("--junit", type=Path, help="write pytest's JUnit XML report here")
    parser.add_argument("--port-offset", type=int, default=None, help="the harness's first port (default: 21000 zabby, 22000 ZooKeeper)")
    args = parser.parse_args()
    if args.system == "zookeeper" and not (JAVA_DIR / "zookeeper.jar").exists():
        subprocess.run(["bash", str(CHECKOUT / "scripts" / "install_zookeeper.sh")], check=True)
    missing = [name for name in ("puresasl", "jks", "OpenSSL", "objgraph", "gevent", "eventlet") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"kazoo's test dependencies are missing ({', '.join(missing)}): pip install -e '.[kazoo-suite]'", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix=f"kazoo-suite-{args.system}-"))
    env = {
        **os.environ,
        "ZOOKEEPER_VERSION": "3.8.0",
        "ZOOKEEPER_CLASSPATH": CLASSPATH,
        "ZOOKEEPER_PORT_OFFSET": str(args.port_offset or (21000 if args.system == "zabby" else 22000)),
        "ZOOKEEPER_JAAS_AUTH": "digest",
        "PYTHONPATH": str(CHECKOUT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    command = [sys.executable, "-m", "pytest", "--pyargs", "kazoo.tests", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--timeout", "300", "-o", "addopts=", "--rootdir", str(work)]  # fmt: skip
    if args.system == "zabby":
        command += ["-p", "harness.differential.kazoo_suite"]
    if args.keyword:
        command += ["-k", args.keyword]
    if args.junit:
        command += ["--junitxml", str(args.junit.resolve())]
    return subprocess.run(command, cwd=work, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
