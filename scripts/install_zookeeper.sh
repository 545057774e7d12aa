#!/usr/bin/env bash
# Install Debian's `zookeeper` package (for zkCli.sh, the Java client) when it is missing.
# Idempotent and quiet: prints the path of zkCli.sh on success; exit 3 when apt-get is not
# available (the caller skips), any other non-zero exit when the install failed.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

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
# (the `zookeeper` package holds the libraries and scripts only; no daemon is started)
apt_install zookeeper || exit $?
find_zkcli || { echo "zookeeper installed but zkCli.sh was not found" >&2; exit 1; }
