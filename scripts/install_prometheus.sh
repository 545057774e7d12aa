#!/usr/bin/env bash
# Install Debian's `prometheus` package when `promtool` is missing (the alert rules' tests run
# `promtool test rules`).  Prints promtool's path on success; exit 3 when apt-get is not
# available (the caller skips), any other non-zero exit when the install failed.
set -euo pipefail
source "$(dirname "$0")/apt_install.sh"

if command -v promtool >/dev/null 2>&1; then
    command -v promtool
    exit 0
fi
apt_install prometheus || exit $?
# the package's daemon is not wanted here: stop it where an init system started it
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
command -v promtool || { echo "prometheus installed but promtool was not found" >&2; exit 1; }
