#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server on a free loopback port.
#   eval "$(bash .ci/postgres.sh start DIR)"   -> exports KB_TEST_POSTGRES_URL
#   bash .ci/postgres.sh stop DIR
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
    as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off -c max_connections=200" \
      start >/dev/null
    echo "export KB_TEST_POSTGRES_URL=postgresql+psycopg://kb@127.0.0.1:$port/postgres"
    ;;
  stop)
    if [ -d "$dir/data" ]; then as_postgres "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null || true; fi
    ;;
esac
