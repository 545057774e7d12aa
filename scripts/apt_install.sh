#!/usr/bin/env bash
# apt_install PACKAGE...: install Debian packages, quietly; the shared part of the
# scripts/install_*.sh scripts (source this file).  Returns 3 when apt-get (or root, or a
# password-less sudo) is not available, so the caller's tests can skip; any other non-zero
# status when the install failed (apt-get's output goes to stderr then).
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "apt-get is not available: cannot install Debian's $*" >&2
        return 3
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            echo "not root and no password-less sudo: cannot run apt-get" >&2
            return 3
        fi
    fi
    local log status=0
    log="$(mktemp)"
    export DEBIAN_FRONTEND=noninteractive
    if ! $sudo apt-get update -qq >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    $sudo apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1 || status=$?
    if [ "$status" != 0 ]; then
        cat "$log" >&2
    fi
    rm -f "$log"
    return "$status"
}
