#!/usr/bin/env bash
# A PostgreSQL server of the benchmark's own, so that its counters (pg_stat_database,
# pg_stat_wal) count foldstream's work only: `bash bench/pg-own.sh start DIR PORT` makes a cluster
# with initdb in DIR (default settings: fsync and synchronous_commit on) listening on
# 127.0.0.1:PORT and prints its URL; `bash bench/pg-own.sh stop DIR` stops it. As root, the
# server runs as the postgres user (PostgreSQL refuses root). Example:
#   url=$(bash bench/pg-own.sh start /tmp/fs-bench-pg 55432)
#   bash bench/run.sh -postgres "$url&search_path=dsbench"
#   bash bench/pg-own.sh stop /tmp/fs-bench-pg
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as=()
if [ "$(id -u)" = 0 ]; then as=(runuser -u postgres --); fi
case "${1:-}" in
start)
	dir=${2:?DIR}
	port=${3:?PORT}
	mkdir -p "$dir"
	if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
	if [ ! -f "$dir/data/PG_VERSION" ]; then
		"${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-instructions >&2
		printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\n" "$port" "$dir" >>"$dir/data/postgresql.conf"
	fi
	"${as[@]}" "$bin/pg_ctl" start -D "$dir/data" -l "$dir/log" -w >&2
	"${as[@]}" "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE bench" 2>/dev/null || true
	echo "postgres://postgres@127.0.0.1:$port/bench?sslmode=disable"
	;;
stop)
	dir=${2:?DIR}
	"${as[@]}" "$bin/pg_ctl" stop -D "$dir/data" -m fast -w >&2
	;;
*)
	echo "usage: bash bench/pg-own.sh start DIR PORT | stop DIR" >&2
	exit 2
	;;
esac
