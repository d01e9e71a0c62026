#!/bin/sh
# install-user.sh: the unprivileged system user the ferryd unit runs as
# (deploy/ferryd.service: User=ferry) and its state directory, made when
# missing; run as root (make install does when DESTDIR is empty).
set -eu
user=${1:-ferry}
home=${2:-/var/lib/ferry}
if ! getent passwd "$user" >/dev/null; then
	echo "install: adding the system user $user (home $home)"
	useradd --system --user-group --home-dir "$home" --shell /usr/sbin/nologin "$user"
fi
mkdir -p "$home"
chown "$user:$user" "$home"
chmod 0711 "$home"
