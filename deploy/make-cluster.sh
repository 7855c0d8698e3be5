#!/usr/bin/env sh
# Write everything the compose cluster (deploy/docker-compose.yml) reads from ./cluster:
# one config per node with freshly generated secrets and hash salts, and the three rings
# built with swiftlite-ring-builder for the compose network's addresses.
#
#   deploy/make-cluster.sh [OUT_DIR]      (default: deploy/cluster)
#
# Needs swiftlite installed where this runs (`make venv` gives .venv/bin; or set
# SWIFTLITE_BIN to the directory holding swiftlite-ring-builder). Refuses to overwrite an
# existing OUT_DIR: new salts would place every object elsewhere.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/cluster"}
bin=${SWIFTLITE_BIN:-"$here/../.venv/bin"}
py="$bin/python"
[ -x "$py" ] || py=python3
builder="$bin/swiftlite-ring-builder"
[ -x "$builder" ] || builder=swiftlite-ring-builder

if [ -e "$out/object.ring.gz" ]; then
    echo "make-cluster: $out already holds a cluster; remove it first" >&2
    exit 2
fi
mkdir -p "$out"

secret() { "$py" -c 'import secrets; print(secrets.token_urlsafe(32))'; }
salt() { "$py" -c 'import secrets; print(secrets.token_hex(8))'; }
backend_secret=$(secret)
auth_secret=$(secret)
prefix=$(salt)
suffix=$(salt)
admin_key=$(secret)

# The compose network's fixed addresses (docker-compose.yml): storage nodes .11-.13,
# memcached .5. Part power 10 (1024 partitions) suits a small cluster; pick
# log2(disks * 100) rounded up for a real one, it cannot change later.
for kind_port in object:6200 container:6201 account:6202; do
    kind=${kind_port%:*}
    port=${kind_port#*:}
    b="$out/$kind.builder"
    "$builder" "$b" create 10 3 1
    for n in 1 2 3; do
        "$builder" "$b" add "r1z$n-172.28.0.1$n:$port/d1" 100
    done
    "$builder" "$b" rebalance
done

for n in 1 2 3; do
    sed -e "s|^backend_secret = .*|backend_secret = $backend_secret|" \
        -e "s|^hash_path_prefix = .*|hash_path_prefix = $prefix|" \
        -e "s|^hash_path_suffix = .*|hash_path_suffix = $suffix|" \
        -e "s|^bind_ip = .*|bind_ip = 172.28.0.1$n|" \
        "$here/../etc/storage-node.conf" > "$out/storage$n.conf"
done
sed -e "s|^backend_secret = .*|backend_secret = $backend_secret|" \
    -e "s|^auth_secret = .*|auth_secret = $auth_secret|" \
    -e "s|^hash_path_prefix = .*|hash_path_prefix = $prefix|" \
    -e "s|^hash_path_suffix = .*|hash_path_suffix = $suffix|" \
    -e "s|^memcache_servers = .*|memcache_servers = 172.28.0.5:11211|" \
    -e "s|^# user_images_uploader = .*|user_images_uploader = $admin_key .admin|" \
    "$here/../etc/proxy-node.conf" > "$out/proxy.conf"
chmod 600 "$out"/*.conf
echo "make-cluster: wrote $out"
echo "  user images:uploader, key in $out/proxy.conf (user_images_uploader)"
