# shellcheck shell=bash
# A throwaway PostgreSQL cluster for the Postgres benchmarks, with fsync ON.
#
#   source bench/postgres.sh && pg_start_durable   # exports TW_PG_DSN (and TW_PG_DIR)
#   python -m bench --only durable_chain_pg,fleet,failover,parked_wake
#   pg_stop                                        # stops the server, deletes its files
#
# The same cluster as .ci/postgres.sh (a temp dir, a unix socket only, the server binaries
# of this machine, run as the `postgres` user when we are root), except that commits are
# durable: fsync and synchronous_commit on, as a journal in production needs them. The
# test cluster runs with both off, which makes commits several times cheaper.
# Source this file, do not run it.

# shellcheck source=../.ci/postgres.sh
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/postgres.sh"

pg_start_durable() {
    local bin dir
    if [ -n "${TW_PG_DIR:-}" ] && [ -d "$TW_PG_DIR" ]; then
        echo "pg_start_durable: a cluster is already running in $TW_PG_DIR (pg_stop first)" >&2
        return 1
    fi
    bin="$(pg_find_bin)" || {
        echo "pg_start_durable: no PostgreSQL server binaries found; install them" \
            "(Debian: apt-get install postgresql) or set PGBIN" >&2
        return 1
    }
    dir="$(mktemp -d "${TW_PG_TMPDIR:-/tmp}/tw-pg.XXXXXX")" || return 1
    chmod 0755 "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir" || { rm -rf "$dir"; return 1; }
    fi
    export TW_PG_DIR="$dir"
    if ! _tw_as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C \
        >"$dir/initdb.log" 2>&1; then
        echo "pg_start_durable: initdb failed:" >&2
        cat "$dir/initdb.log" >&2
        pg_stop
        return 1
    fi
    if ! _tw_as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -c listen_addresses= -c fsync=on -c synchronous_commit=on -c max_connections=200" \
        start >/dev/null; then
        echo "pg_start_durable: the server did not start; its log:" >&2
        cat "$dir/server.log" >&2 || true
        pg_stop
        return 1
    fi
    export TW_PG_DSN="postgresql://postgres@/postgres?host=$dir"
    echo "$TW_PG_DSN"
}
