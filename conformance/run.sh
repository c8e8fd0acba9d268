#!/usr/bin/env bash
# Runs the pinned upstream Durable Streams server conformance suite (0.3.6) against foldstream.
# Installs the suite's pinned Node packages (npm ci in conformance/) when they are missing. Extra
# arguments go to vitest (e.g. -t "SSE Mode"). Exits non-zero on any failure and prints the
# summary line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
export PATH="/usr/local/go/bin:$PATH"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "conformance/run.sh needs Node.js 20 or later and npm (the suite is a Node package)." >&2
	echo "Install them (Debian/Ubuntu: apt-get install nodejs npm; or https://nodejs.org), then run this again." >&2
	exit 1
fi
if [ ! -d "$here/node_modules/@durable-streams/server-conformance-tests" ]; then
	echo "== npm ci in conformance/ (the pinned suite; once)"
	if ! (cd "$here" && npm ci --no-audit --no-fund --loglevel=error); then
		echo "npm ci failed in conformance/: check the network or npm's registry settings, then run" >&2
		echo "  (cd conformance && npm ci) && bash conformance/run.sh" >&2
		exit 1
	fi
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && go build -o "$work/foldstream" ./cmd/foldstream)
# One run of the suite against `foldstream serve --db "$1"` ($2 labels it).
run_suite() {
	# Port 0: the kernel picks a free port; serve prints the address once it is listening.
	: >"$work/server.out"
	# The long-poll timeout bounds how long a test's long-poll waits for an append the test makes
	# next: "wait for fork appends, not source appends" appends to the source and then to the fork
	# while its long-poll on the fork waits. On a busy machine those two appends took longer than
	# 500 ms, the long-poll ran out first and the test saw 204. 3 s keeps the suite near its time
	# (tests that wait the whole timeout are few) and leaves room for a loaded machine.
	"$work/foldstream" serve --addr 127.0.0.1:0 --db "$1" --long-poll-timeout "${CONFORMANCE_LONG_POLL_TIMEOUT:-3s}" --allow-loopback-webhooks \
		--log-level "${FOLDSTREAM_LOG_LEVEL:-warn}" >"$work/server.out" 2>"$work/server.log" &
	server_pid=$!
	url=""
	for _ in $(seq 1 200); do
		url="$(sed -n 's|^foldstream: serving \(http://[^/]*\)/.*|\1|p' "$work/server.out")"
		if [ -n "$url" ]; then break; fi
		if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log"; echo "server failed to start"; return 1; fi
		sleep 0.05
	done
	if [ -z "$url" ]; then cat "$work/server.log"; echo "server did not start"; return 1; fi
	echo "== foldstream serving $url ($2)"

	set +e
	# A per-test timeout of 30 s instead of vitest's 5 s: one test checks 100 KiB byte by byte inside
	# the runner and needs more than 5 s of CPU on a loaded 2-core machine (README.md here). Timings
	# the suite asserts are measured inside the tests and unaffected.
	timeout_ms="${CONFORMANCE_TEST_TIMEOUT_MS:-30000}"
	(cd "$here" && CONFORMANCE_TEST_URL="$url" npx vitest run conformance.test.mjs --testTimeout="$timeout_ms" "${vitest_args[@]}" 2>&1 | tee "$work/vitest.out")
	local status=${PIPESTATUS[0]}
	set -e
	kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""
	if [ -s "$work/server.log" ]; then echo "== server log (warnings and errors)"; tail -n 50 "$work/server.log"; fi
	echo "== summary ($2)"
	sed 's/\x1b\[[0-9;]*m//g' "$work/vitest.out" | grep -E "^\s*(Test Files|Tests)\s" || true
	return "$status"
}

vitest_args=("$@")
status=0
run_suite "$work/conformance.db" "SQLite" || status=1
# With FOLDSTREAM_TEST_POSTGRES set (CI sets it), the suite runs a second time against a store on
# PostgreSQL, in a fresh schema the driver creates (dropped afterwards when psql is at hand).
if [ -n "${FOLDSTREAM_TEST_POSTGRES:-}" ]; then
	schema="conformance_$$_$(date +%s)"
	sep='?'; case "$FOLDSTREAM_TEST_POSTGRES" in *\?*) sep='&';; esac
	run_suite "${FOLDSTREAM_TEST_POSTGRES}${sep}search_path=${schema}" "PostgreSQL" || status=1
	if command -v psql >/dev/null; then
		psql "$FOLDSTREAM_TEST_POSTGRES" -qc "DROP SCHEMA IF EXISTS ${schema} CASCADE" >/dev/null 2>&1 || true
	fi
fi
exit "$status"
