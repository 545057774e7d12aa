#!/usr/bin/env bash
# Install one zabby server under systemd, as docs/operations.md (*Installing under systemd*)
# describes it step by step:
#
#   deploy/systemd/install.sh --id 1 --servers "1=zk1.example:2888:3888;2181,2=zk2.example:2888:3888;2181,3=zk3.example:2888:3888;2181"
#
# 1. a system user and group `zabby` (no shell, no home);
# 2. /etc/zabby/zooN.cfg (root-owned, read-only to the server) and /etc/zabby/logging.json;
# 3. /var/lib/zabby/N (owned by zabby): myid, the data and log folders, and the dynamic
#    configuration (the server.N lines) that a committed reconfig rewrites: the unit lets the
#    server write under /var/lib/zabby only (ProtectSystem=strict);
# 4. /etc/systemd/system/zabby@.service.
# Then: systemctl daemon-reload && systemctl enable --now zabby@N.
#
# --root DIR installs into DIR instead of / (no user is made, nothing is chowned, systemd is
# not told): tests/deploy/test_service_files.py checks the layout that way.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
root="" sid="" servers="" prefix="/opt/zabby"
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root="$2"; shift 2 ;;
        --id) sid="$2"; shift 2 ;;
        --servers) servers="$2"; shift 2 ;;
        --prefix) prefix="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ "$sid" =~ ^[0-9]+$ ]] || { echo "--id N: this server's id (a number) is required" >&2; exit 2; }
[ -n "$servers" ] || { echo "--servers 'ID=host:quorumPort:electionPort;clientPort,...' is required" >&2; exit 2; }

etc="$root/etc/zabby" lib="$root/var/lib/zabby/$sid" unit_dir="$root/etc/systemd/system"
if [ -z "$root" ]; then
    getent group zabby >/dev/null || groupadd --system zabby
    getent passwd zabby >/dev/null || useradd --system --gid zabby --no-create-home --home-dir /var/lib/zabby \
        --shell /usr/sbin/nologin zabby
fi
install -d -m 0755 "$etc" "$unit_dir"
install -d -m 0750 "$lib" "$lib/data" "$lib/log"
echo "$sid" > "$lib/data/myid"
dynamic="$lib/zoo.cfg.dynamic"
if [ ! -e "$dynamic" ]; then  # never over a membership a reconfig wrote
    tr ',' '\n' <<<"$servers" | sed -e 's/^ *//' -e '/^$/d' -e 's/^/server./' > "$dynamic"
fi
config="$etc/zoo$sid.cfg"
if [ ! -e "$config" ]; then
    cat > "$config" <<CFG
# zabby server $sid (deploy/systemd/install.sh); docs/operations.md lists every key.
tickTime=2000
initLimit=10
syncLimit=5
dataDir=/var/lib/zabby/$sid/data
dataLogDir=/var/lib/zabby/$sid/log
# the server.N lines: a committed reconfig rewrites this file, so it lives where the unit
# lets the server write (never beside this read-only file)
dynamicConfigFile=/var/lib/zabby/$sid/zoo.cfg.dynamic
reconfigEnabled=true
4lw.commands.whitelist=ruok,srvr,mntr,isro
CFG
    chmod 0644 "$config"
fi
install -m 0644 "$repo/deploy/logging/logging.json" "$etc/logging.json"
sed -e "s#/opt/zabby#$prefix#g" "$here/zabby@.service" > "$unit_dir/zabby@.service"
chmod 0644 "$unit_dir/zabby@.service"
if [ -z "$root" ]; then
    chown -R zabby:zabby "/var/lib/zabby/$sid"
    if command -v systemctl >/dev/null 2>&1; then systemctl daemon-reload || true; fi
    echo "installed; start it with: systemctl enable --now zabby@$sid"
fi
