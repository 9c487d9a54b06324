# shellcheck shell=bash
# --- FerretDB 1.24 (MongoDB wire protocol, SQLite handler), for mongo/ ----
# Built from the Go module proxy once and cached in $BATON_TOOLS_DIR
# (default /tmp/baton-tools, shared by every $DIR's instance): the
# proxy refuses FerretDB's version list, so the exact version is fetched
# into a scratch module and built from a writable copy of its module
# directory, with the version file its build expects.
FERRETDB_PORT=${BATON_FERRETDB_PORT:-27017}
FERRETDB_VERSION=v1.24.0
ferretdb_dir="$DIR/ferretdb"
ferretdb_bin="${BATON_TOOLS_DIR:-/tmp/baton-tools}/ferretdb-$FERRETDB_VERSION"
ferretdb_install() {
  [ -x "$ferretdb_bin" ] && return 0
  command -v go >/dev/null || die "FerretDB is built with Go, which is not on PATH"
  log "building FerretDB $FERRETDB_VERSION from the Go module proxy (about two minutes)"
  local scratch="$ferretdb_dir/scratch" src="$ferretdb_dir/src" mod
  rm -rf "$scratch" "$src"
  mkdir -p "$scratch" "$(dirname "$ferretdb_bin")"
  (
    cd "$scratch" && export GOWORK=off GOFLAGS=-mod=mod &&
      go mod init scratch >/dev/null 2>&1 &&
      go get "github.com/FerretDB/FerretDB@$FERRETDB_VERSION" >"$DIR/logs/ferretdb-build.log" 2>&1
  ) || { tail -n 20 "$DIR/logs/ferretdb-build.log" >&2; die "fetching FerretDB failed"; }
  mod=$(cd "$scratch" && GOWORK=off go list -m -f '{{.Dir}}' github.com/FerretDB/FerretDB) || die "FerretDB module not found"
  cp -r "$mod" "$src"
  chmod -R u+w "$src"
  echo "$FERRETDB_VERSION" >"$src/build/version/version.txt"
  (cd "$src" && GOWORK=off CGO_ENABLED=0 go build -o "$ferretdb_bin.tmp" ./cmd/ferretdb >>"$DIR/logs/ferretdb-build.log" 2>&1) ||
    { tail -n 20 "$DIR/logs/ferretdb-build.log" >&2; die "building FerretDB failed"; }
  mv "$ferretdb_bin.tmp" "$ferretdb_bin"
  rm -rf "$scratch" "$src"
}
ferretdb_ready() { (exec 3<>/dev/tcp/127.0.0.1/"$FERRETDB_PORT") 2>/dev/null; }
# synchronous(normal): no fsync per commit, as MongoDB's default write
# concern does not wait for its journal either; the data survives a
# FerretDB kill, only not a machine crash.
ferretdb_start() {
  ferretdb_ready && return 0
  mkdir -p "$ferretdb_dir/data" "$ferretdb_dir/state"
  setsid "$ferretdb_bin" --handler=sqlite --sqlite-url="file:$ferretdb_dir/data/?_pragma=synchronous(normal)" \
    --listen-addr="127.0.0.1:$FERRETDB_PORT" --debug-addr=- --state-dir="$ferretdb_dir/state" \
    --telemetry=disable --log-level=warn \
    >>"$DIR/logs/ferretdb.log" 2>&1 </dev/null &
  echo $! >"$DIR/ferretdb.pid"
  wait_for ferretdb 30 ferretdb_ready
}
ferretdb_stop() { stop_pidfile "$DIR/ferretdb.pid"; }
ferretdb_env() { echo "BATON_TEST_MONGO=mongodb://127.0.0.1:$FERRETDB_PORT/baton_test"; }
ALL+=(ferretdb)
