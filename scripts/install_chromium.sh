#!/usr/bin/env bash
# Install Debian's `chromium` package (headless Chromium for the web console's browser test)
# when it is missing.  Idempotent and quiet: prints the path of the browser on success; exit 3
# when apt-get is not available (the caller skips), any other non-zero exit when it failed.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

find_chromium() {
    for candidate in /usr/bin/chromium /usr/bin/chromium-browser; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if find_chromium; then
    exit 0
fi
# (fonts-liberation: readable text in the screenshots; no other recommends)
apt_install chromium fonts-liberation || exit $?
find_chromium || { echo "chromium installed but its binary was not found" >&2; exit 1; }
