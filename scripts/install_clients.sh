#!/usr/bin/env bash
# Install the Debian packages the other ZooKeeper clients' runs need (harness.differential.clients,
# scripts/client_suites.py) when any is missing: the Go toolchain (golang-go) and go-zookeeper's
# sources with its tests (golang-github-samuel-go-zookeeper-dev), the C client's tools
# (zookeeper-bin: cli_mt, load_gen) and library (libzookeeper-mt-dev), gcc.  Idempotent and
# quiet; exit 3 when apt-get is not available (the caller skips), any other non-zero exit when
# the install failed.  node-zookeeper-client (npm) and aiozk (PyPI) are installed at run time.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

GO_ZOOKEEPER=/usr/share/gocode/src/github.com/samuel/go-zookeeper/zk
present() {
    command -v go >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 && [ -f "$GO_ZOOKEEPER/zk_test.go" ] \
        && [ -x /usr/lib/zookeeper/bin/cli_mt ] && [ -x /usr/lib/zookeeper/bin/load_gen ] && [ -f /usr/include/zookeeper/zookeeper.h ]
}

if present; then
    exit 0
fi
apt_install golang-go golang-github-samuel-go-zookeeper-dev zookeeper-bin libzookeeper-mt-dev gcc libc6-dev || exit $?
present || { echo "the packages were installed but go, gcc, go-zookeeper's tests, cli_mt, load_gen or zookeeper.h is missing" >&2; exit 1; }
