#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server on a free loopback port.
#   eval "$(bash .ci/postgres.sh start DIR)"   -> exports KB_TEST_POSTGRES_URL
#   bash .ci/postgres.sh stop DIR
#   bash .ci/postgres.sh restart DIR   (pg_ctl restart: what the reconnect tests do)
#   bash .ci/postgres.sh halt DIR      (a fast shutdown; `resume DIR` starts it again)
set -euo pipefail
action=$1
dir=$2

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ] && [ "$action" = start ]; then
  apt-get update -qq >/dev/null && apt-get install -y -qq postgresql >/dev/null
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$action" in
  start)
    mkdir -p "$dir"
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
