#!/usr/bin/env bash
# deploy/podman.sh — gets Podman working for `executor: podman` on a fresh
# Debian machine (idempotent; run as root; tests run it too).
#
#   1. the drop-in /etc/containers/containers.conf.d/50-ferry.conf these
#      machines need (RUNTIME.md): default ulimits that fit under the hard
#      nofile limit here (podman's default asks for more and runc refuses),
#      and runc (crun fails on the hybrid cgroup layout);
#   2. the local image ferry-base (no registry is reachable): a busybox-static
#      root filesystem with one symlink per applet, imported from a tarball.
#
# Podman is daemonless: nothing is started, so there is nothing to stop.
# Remove the image with `podman rmi ferry-base`, the drop-in with rm.
# Needs: podman runc busybox-static tini (make deps).
set -euo pipefail

IMAGE=${FERRY_PODMAN_IMAGE:-ferry-base}
CONF_DIR=${FERRY_PODMAN_CONF_DIR:-/etc/containers/containers.conf.d}
CONF=$CONF_DIR/50-ferry.conf

for bin in podman runc busybox; do
	command -v "$bin" >/dev/null || { echo "podman.sh: $bin is not installed (make deps installs podman runc busybox-static)" >&2; exit 1; }
done

nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
want=$(cat <<EOF
# written by ferry deploy/podman.sh: what Podman needs on these machines
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]

[engine]
runtime = "runc"
EOF
)
mkdir -p "$CONF_DIR"
if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$want" ]; then
	echo "podman.sh: $CONF is up to date"
else
	printf '%s\n' "$want" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
	echo "podman.sh: wrote $CONF (nofile=$nofile:$nofile, nproc=32768, runtime=runc)"
fi

if podman image exists "$IMAGE"; then
	echo "podman.sh: image $IMAGE is there"
else
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	root=$tmp/rootfs
	mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/root"
	chmod 1777 "$root/tmp"
	cp "$(command -v busybox)" "$root/bin/busybox"
	for applet in $("$root/bin/busybox" --list); do
		[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
	done
	echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
	echo 'root:x:0:' >"$root/etc/group"
	tar -C "$root" -cf "$tmp/rootfs.tar" .
	podman import --quiet --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' "$tmp/rootfs.tar" "$IMAGE" >/dev/null
	echo "podman.sh: built image $IMAGE from busybox-static ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
fi
