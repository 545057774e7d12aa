#!/usr/bin/env bash
# Install Debian's Apache Curator (libcurator-recipes-java, which pulls in the framework, the
# client, guava, slf4j and ZooKeeper's client jar) when it is missing.  Idempotent and quiet:
# prints the path of the recipes jar on success; exit 3 when apt-get is not available (the
# caller skips), any other non-zero exit when the install failed.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

find_recipes() {
    for candidate in /usr/share/java/curator-recipes.jar; do
        if [ -f "$candidate" ] && [ -f /usr/share/java/curator-framework.jar ] && [ -f /usr/share/java/curator-client.jar ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if find_recipes; then
    exit 0
fi
apt_install libcurator-recipes-java || exit $?
find_recipes || { echo "libcurator-recipes-java installed but curator-recipes.jar was not found" >&2; exit 1; }
