#!/bin/sh
# Makes the Citus extension available for tests (Citus is optional: the
# compat flavor needs nothing of it). When citus.so is missing and the test
# archive ../shared/citus/citus-13.2.2-pg15-amd64.tar.gz (relative to the
# repository root, or $CITUS_ARCHIVE_DIR) is there, root installs it:
# postgresql-15 is upgraded first when older than the build (15.20), the
# runtime libraries are installed, SHA256SUMS is checked, and the archive is
# extracted to /. Nothing of Citus is copied into the project.
set -e
cd "$(dirname "$0")/.."

ARCHIVE_DIR=${CITUS_ARCHIVE_DIR:-../shared/citus}
ARCHIVE=citus-13.2.2-pg15-amd64.tar.gz
PG_MIN=15.20 # the postgresql-15 the archive was built against

have_citus() {
	if command -v pg_config >/dev/null 2>&1; then
		[ -f "$(pg_config --pkglibdir)/citus.so" ] && return 0
	fi
	[ -f /usr/lib/postgresql/15/lib/citus.so ] && return 0
	return 1
}

if have_citus; then
	exit 0
fi
if [ ! -f "$ARCHIVE_DIR/$ARCHIVE" ]; then
	echo "Citus is not installed, so Citus tests will be skipped: install the Citus 13 extension for PostgreSQL 15 (citus.so in $(pg_config --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)), or put $ARCHIVE in $ARCHIVE_DIR and rerun make deps as root." >&2
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "Citus is not installed, so Citus tests will be skipped: as root run make deps (it installs $ARCHIVE_DIR/$ARCHIVE), or install the Citus 13 extension for PostgreSQL 15 yourself." >&2
	exit 0
fi

echo "installing Citus 13.2.2 for PostgreSQL 15 from $ARCHIVE_DIR..." >&2
export DEBIAN_FRONTEND=noninteractive
(cd "$ARCHIVE_DIR" && sha256sum -c --quiet SHA256SUMS) || {
	echo "$ARCHIVE_DIR/$ARCHIVE does not match its SHA256SUMS; not installing it" >&2
	exit 1
}
pg=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null || true)
updated=
if [ -z "$pg" ] || dpkg --compare-versions "$pg" lt "$PG_MIN"; then
	echo "upgrading postgresql-15 ${pg:-(not installed)} to the version Citus was built against (>= $PG_MIN)..." >&2
	apt-get update -qq >/dev/null
	updated=1
	apt-get install -y -qq postgresql-15 >/dev/null
	pg=$(dpkg-query -W -f='${Version}' postgresql-15)
	if dpkg --compare-versions "$pg" lt "$PG_MIN"; then
		echo "postgresql-15 is $pg after apt-get install, but Citus needs $PG_MIN or newer; not installing Citus" >&2
		exit 1
	fi
fi
missing=
for lib in libpq5 liblz4-1 libzstd1; do
	dpkg-query -W -f='${Status}' "$lib" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $lib"
done
if [ -n "$missing" ]; then
	[ -n "$updated" ] || apt-get update -qq >/dev/null
	# shellcheck disable=SC2086
	apt-get install -y -qq $missing >/dev/null
fi
tar -xzmf "$ARCHIVE_DIR/$ARCHIVE" -C / --no-same-owner
have_citus || {
	echo "extracted $ARCHIVE but citus.so is still not where PostgreSQL 15 loads extensions from" >&2
	exit 1
}
echo "Citus 13.2.2 installed for PostgreSQL 15 ($pg)" >&2
