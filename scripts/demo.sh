#!/bin/sh
# make demo: a sandbox cluster with github data and a routed workload; the
# daemon rebalances online after a third worker is added; then the layout
# before and after and the ledger verdict. KEEP=1 leaves the sandbox running.
set -eu
cd "$(dirname "$0")/.."
SM=./bin/shardmover
DIR=${DEMO_DIR:-.sandbox-demo}
PORT=${DEMO_PORT:-9700}
HTTP=${DEMO_HTTP:-127.0.0.1:9187}
LOGS=$DIR-logs
WL_PID= ; DAEMON_PID=
cleanup() {
	[ -n "$WL_PID" ] && kill "$WL_PID" 2>/dev/null || true
	[ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	if [ "${KEEP:-0}" = 1 ]; then
		echo "sandbox left running in $DIR (stop it: $SM sandbox down --dir $DIR --purge)"
	else
		$SM sandbox down --dir "$DIR" --purge >/dev/null 2>&1 || true
		rm -rf "$LOGS"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
step() { printf '\n==> %s\n' "$*"; }
mkdir -p "$LOGS"

step "start a coordinator and two workers on 127.0.0.1:$PORT.."
$SM sandbox up --dir "$DIR" --port "$PORT" --nodes 2
step "create and distribute github_users and github_events (32 colocated shards), load generated data"
$SM sandbox load --dir "$DIR" --users 5000 --events 60000
step "layout before"
$SM status --dir "$DIR"

step "start the routed workload (8 clients: inserts, updates, deletes; every acknowledged write in a ledger)"
$SM workload --dir "$DIR" --duration 10m --clients 8 --users 5000 >"$LOGS/workload.out" 2>&1 &
WL_PID=$!
step "start the daemon (leader lock, node watcher, metrics on http://$HTTP/metrics)"
$SM daemon --dir "$DIR" --listen "$HTTP" --settle 5s --concurrency 2 --per-node 1 >"$LOGS/daemon.log" 2>&1 &
DAEMON_PID=$!
sleep 2

step "add a third worker; the daemon notices, waits 5 s for more, then rebalances online"
$SM sandbox add-node --dir "$DIR"
i=0
# The daemon logs "rebalance finished" once its job is done and it has
# measured again (and moved once more when the copies left a node outside
# the band: --recheck).
until grep -q '"rebalance finished"' "$LOGS/daemon.log" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 240 ]; then echo "the rebalance did not finish in 2 minutes; see $LOGS/daemon.log" >&2; exit 1; fi
	if ! kill -0 "$DAEMON_PID" 2>/dev/null; then echo "the daemon stopped; see $LOGS/daemon.log" >&2; tail -5 "$LOGS/daemon.log" >&2; exit 1; fi
	sleep 0.5
done
$SM jobs list --dir "$DIR"

step "layout after the daemon's rebalance"
$SM status --dir "$DIR"

step "stop the workload and check the ledger"
kill -INT "$WL_PID"
wait "$WL_PID" || { cat "$LOGS/workload.out"; exit 1; }
WL_PID=
cat "$LOGS/workload.out"

step "rebalance once more, now that the data has stopped growing"
echo "(the daemon planned when the worker was added and measured again after its moves (--recheck);"
echo " the workload wrote since, most of it for a few busy users, so shares of data may have drifted;"
echo " a scheduled rebalance (daemon --schedule) does this)"
echo "(first drop the old copies the moves kept for their grace period: a group may go back to a node it left)"
$SM cleanup --dir "$DIR" --keep-old-for 0s
$SM rebalance --dir "$DIR" --concurrency 2 --yes
step "layout at the end"
$SM status --dir "$DIR"
$SM plan --dir "$DIR" | sed -n '1,3p'
step "done"
