#!/usr/bin/env bash
# Side-by-side benchmark: foldstream vs the reference Durable Streams server (file-backed store).
# Installs the reference server's pinned npm packages if missing, builds foldstream and the load
# generator, runs every scenario, and prints a Markdown table. Extra arguments go to dsbench,
# e.g. `bash bench/run.sh -out bench/results.md` or `bash bench/run.sh -quick -rounds 1`.
# Both servers bind to 127.0.0.1; the whole run is bounded (dsbench -max-duration, default 15m;
# the default sizes take a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [ ! -d bench/refserver/node_modules/@durable-streams/server ]; then
	echo "== npm ci (bench/refserver)" >&2
	(cd bench/refserver && npm ci --no-audit --no-fund >&2)
fi

bin=$(mktemp -d -t dsbench-bin-XXXXXX)
trap 'rm -rf "$bin"' EXIT

fold_args=()
if [ -d cmd/foldstream ]; then
	echo "== go build ./cmd/foldstream" >&2
	go build -o "$bin/foldstream" ./cmd/foldstream
	version=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git status --porcelain 2>/dev/null)" ]; then version="$version+dirty"; fi
	fold_args=(-foldstream "$bin/foldstream" -foldstream-version "$version")
else
	echo "== cmd/foldstream not in this tree yet: measuring the reference alone" >&2
fi

echo "== go build ./bench/cmd/dsbench" >&2
go build -o "$bin/dsbench" ./bench/cmd/dsbench

"$bin/dsbench" "${fold_args[@]}" -refserver bench/refserver "$@"
