#!/bin/sh
# Makes sure PostgreSQL server binaries exist; installs Debian's postgresql-15
# when running as root, otherwise says exactly what to install.
set -e
have() {
	[ -n "$PG_BINDIR" ] && [ -x "$PG_BINDIR/initdb" ] && return 0
	command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
	return 1
}
if have && id postgres >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "installing PostgreSQL server packages (postgresql-15)..." >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq postgresql-15 >/dev/null
	exit 0
fi
echo "PostgreSQL server binaries are missing: install postgresql-15 (Debian: sudo apt-get install postgresql-15) or set PG_BINDIR to the folder holding initdb and pg_ctl" >&2
exit 1
