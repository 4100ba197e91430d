#!/bin/sh
# make demo: a sandbox cluster, github data, a routed workload with a ledger,
# the verdict and the layout. Set KEEP=1 to leave the sandbox running.
set -eu
cd "$(dirname "$0")/.."
SM=./bin/shardmover
DIR=${DEMO_DIR:-.sandbox-demo}
PORT=${DEMO_PORT:-9700}
cleanup() {
	if [ "${KEEP:-0}" = 1 ]; then
		echo "sandbox left running in $DIR (stop it: $SM sandbox down --dir $DIR --purge)"
	else
		$SM sandbox down --dir "$DIR" --purge >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT INT TERM
step() { printf '\n==> %s\n' "$*"; }

step "start a coordinator and two workers on 127.0.0.1:$PORT.."
$SM sandbox up --dir "$DIR" --port "$PORT" --nodes 2
step "create and distribute github_users and github_events (32 colocated shards), load generated data"
$SM sandbox load --dir "$DIR" --users 5000 --events 60000
step "layout"
$SM status --dir "$DIR"
step "routed workload: 8 clients for 10 s, inserts, updates and deletes, every acknowledged write in a ledger"
$SM workload --dir "$DIR" --duration 10s --clients 8
step "done"
