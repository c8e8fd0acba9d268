#!/usr/bin/env bash
# Side-by-side benchmark: foldstream vs the reference Durable Streams server (file-backed store).
# Installs the reference server's pinned npm packages if missing, builds foldstream and the load
# generator, runs every scenario, and prints a Markdown table. Extra arguments go to dsbench,
# e.g. `bash bench/run.sh -out bench/results.md` or `bash bench/run.sh -quick -rounds 1`.
# Both servers bind to 127.0.0.1; the whole run is bounded (dsbench -max-duration, default 15m;
# the default sizes take a few minutes).
#
# DSBENCH_PROFILE_DIR=DIR profiles foldstream under the same load: foldstream is then served by
# bench/cmd/dsbench-profserve (same store and handler settings), which writes DIR/cpu.prof,
# DIR/block.prof and DIR/trace.out, with the binary as DIR/foldstream-profserve for pprof:
#   go tool pprof -top -cum DIR/foldstream-profserve DIR/cpu.prof
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [ ! -d internal/harness/refserver/node_modules/@durable-streams/server ]; then
	echo "== npm ci (internal/harness/refserver)" >&2
	(cd internal/harness/refserver && npm ci --no-audit --no-fund >&2)
fi

bin=$(mktemp -d -t dsbench-bin-XXXXXX)
trap 'rm -rf "$bin"' EXIT

fold_args=()
if [ -d cmd/foldstream ]; then
	version=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git status --porcelain 2>/dev/null)" ]; then version="$version+dirty"; fi
	if [ -n "${DSBENCH_PROFILE_DIR:-}" ]; then
		prof=$(mkdir -p "$DSBENCH_PROFILE_DIR" && cd "$DSBENCH_PROFILE_DIR" && pwd)
		echo "== go build ./bench/cmd/dsbench-profserve (profiles to $prof)" >&2
		go build -o "$prof/foldstream-profserve" ./bench/cmd/dsbench-profserve
		fold_args=(-foldstream "$prof/foldstream-profserve" -foldstream-version "$version (profiled)"
			-foldstream-args "--cpuprofile $prof/cpu.prof --blockprofile $prof/block.prof --trace $prof/trace.out")
	else
		echo "== go build ./cmd/foldstream" >&2
		go build -o "$bin/foldstream" ./cmd/foldstream
		fold_args=(-foldstream "$bin/foldstream" -foldstream-version "$version")
	fi
else
	echo "== cmd/foldstream not in this tree yet: measuring the reference alone" >&2
fi

echo "== go build ./bench/cmd/dsbench" >&2
go build -o "$bin/dsbench" ./bench/cmd/dsbench

"$bin/dsbench" "${fold_args[@]}" -refserver internal/harness/refserver "$@"
