#!/usr/bin/env bash
# Install Debian's `zookeeper` package (for zkCli.sh, the Java client) when it is missing.
# Idempotent and quiet: prints the path of zkCli.sh on success; exit 3 when apt-get is not
# available (the caller skips), any other non-zero exit when the install failed.
set -euo pipefail

find_zkcli() {
    for candidate in /usr/share/zookeeper/bin/zkCli.sh /usr/bin/zkCli.sh /usr/bin/zookeeper-client; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if find_zkcli; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "apt-get is not available: cannot install Debian's zookeeper package" >&2
    exit 3
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "not root and no password-less sudo: cannot run apt-get" >&2
        exit 3
    fi
fi
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! $SUDO apt-get update -qq >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
fi
# (the `zookeeper` package holds the libraries and scripts only; no daemon is started)
status=0
$SUDO apt-get install -y -qq --no-install-recommends zookeeper >"$log" 2>&1 || status=$?
if [ "$status" != 0 ]; then
    cat "$log" >&2
    exit "$status"
fi
find_zkcli || { echo "zookeeper installed but zkCli.sh was not found" >&2; exit 1; }
