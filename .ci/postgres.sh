# shellcheck shell=bash
# A throwaway PostgreSQL cluster for the tests marked `postgres`.
#
#   source .ci/postgres.sh && pg_start   # prints the DSN and exports TW_PG_DSN
#   python -m pytest -q -m postgres      # add TW_REQUIRE_POSTGRES=1 to fail instead of skip
#   pg_stop                              # stops the server and deletes its files
#
# The cluster lives in a fresh temp dir, listens on a unix socket in that dir only (no TCP,
# so clusters never collide) and runs with fsync off: it is for tests, never for data.
# It uses the server binaries of this machine: $PGBIN if set, else the newest
# /usr/lib/postgresql/<v>/bin, else the directory of `pg_ctl` on PATH. initdb and postgres
# refuse to run as root, so as root they run as the `postgres` user through runuser.
# Source this file, do not run it: pg_start exports into the calling shell.

# The highest-versioned directory that has initdb and pg_ctl; prints it, or fails.
pg_find_bin() {
    local candidate
    if [ -n "${PGBIN:-}" ]; then
        if [ -x "$PGBIN/initdb" ] && [ -x "$PGBIN/pg_ctl" ]; then
            echo "$PGBIN"
            return 0
        fi
        echo "pg_find_bin: PGBIN=$PGBIN has no initdb/pg_ctl" >&2
        return 1
    fi
    for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
        if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
            echo "$candidate"
            return 0
        fi
    done
    candidate="$(command -v pg_ctl 2>/dev/null)" || candidate=""
    if [ -n "$candidate" ] && [ -x "$(dirname "$candidate")/initdb" ]; then
        dirname "$candidate"
        return 0
    fi
    return 1
}

# Run a server binary as the `postgres` user when we are root, else as ourselves.
_tw_as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Start a cluster, export TW_PG_DSN (and TW_PG_DIR, its directory) and print the DSN.
pg_start() {
    local bin dir
    if [ -n "${TW_PG_DIR:-}" ] && [ -d "$TW_PG_DIR" ]; then
        echo "pg_start: a cluster is already running in $TW_PG_DIR (pg_stop first)" >&2
        return 1
    fi
    bin="$(pg_find_bin)" || {
        echo "pg_start: no PostgreSQL server binaries found; install them" \
            "(Debian: apt-get install postgresql) or set PGBIN" >&2
        return 1
    }
    if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
        echo "pg_start: running as root needs a 'postgres' user to run the server as" >&2
        return 1
    fi
    # /tmp, not $TMPDIR: the postgres user must reach the dir and a unix socket path is
    # limited to about 100 bytes.
    dir="$(mktemp -d "${TW_PG_TMPDIR:-/tmp}/tw-pg.XXXXXX")" || return 1
    chmod 0755 "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir" || { rm -rf "$dir"; return 1; }
    fi
    export TW_PG_DIR="$dir"
    if ! _tw_as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C \
        --no-sync >"$dir/initdb.log" 2>&1; then
        echo "pg_start: initdb failed:" >&2
        cat "$dir/initdb.log" >&2
        pg_stop
        return 1
    fi
    if ! _tw_as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -c listen_addresses= -c fsync=off -c synchronous_commit=off" \
        start >/dev/null; then
        echo "pg_start: the server did not start; its log:" >&2
        cat "$dir/server.log" >&2 || true
        pg_stop
        return 1
    fi
    export TW_PG_DSN="postgresql://postgres@/postgres?host=$dir"
    echo "$TW_PG_DSN"
}

# Stop the cluster pg_start made (fast shutdown), wait for its postmaster to exit, and
# delete its directory. Safe to call twice, when nothing was started, and under `set -e`.
pg_stop() {
    local dir="${TW_PG_DIR:-}" bin pid="" i
    [ -n "$dir" ] || return 0
    if [ -f "$dir/data/postmaster.pid" ]; then
        pid="$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)" || pid=""
        if bin="$(pg_find_bin)"; then
            _tw_as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
        fi
        # pg_ctl returns once the pid file is gone; the process may still be exiting.
        if [ -n "$pid" ]; then
            for i in $(seq 1 100); do
                kill -0 "$pid" 2>/dev/null || break
                if [ "$i" = 50 ]; then
                    kill -QUIT "$pid" 2>/dev/null || true # immediate shutdown
                fi
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then
                kill -KILL "$pid" 2>/dev/null || true
                sleep 0.2
            fi
        fi
    fi
    rm -rf "$dir"
    unset TW_PG_DIR TW_PG_DSN
    return 0
}
