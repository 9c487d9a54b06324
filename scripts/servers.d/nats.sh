# shellcheck shell=bash
# --- NATS with JetStream: 2.10 (the oldest the store supports) and 2.15,
# built once per machine from the Go module proxy (go install, ~30 s each).
# The monitoring port (client port + 1000) answers /healthz once JetStream
# is ready. JetStream's default sync_interval (2 min) is kept, as users
# run it: a crash of the server process loses no acknowledged write (the
# page cache has it), a crash of the machine may (docs/stores/nats.md).
server nats210 NATS 4222
server nats215 NATS 4223

NATS210_VERSION=v2.10.29
NATS215_VERSION=v2.15.2
nats_bin() { echo "$TOOLS/nats-server-$1/nats-server"; }

# nats_install VERSION
nats_install() {
  [ -x "$(nats_bin "$1")" ] && return 0
  command -v go >/dev/null || die "nats-server $1 is built with Go, which is not on PATH"
  log "building nats-server $1 from the Go module proxy (about 30 s)"
  (
    cd "$TOOLS" && export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$TOOLS/nats-server-$1.tmp" &&
      go install "github.com/nats-io/nats-server/v2@$1"
  ) >"$DIR/logs/nats-build-$1.log" 2>&1 || { tail -n 20 "$DIR/logs/nats-build-$1.log" >&2; die "building nats-server $1 failed"; }
  rm -rf "$TOOLS/nats-server-$1" && mv "$TOOLS/nats-server-$1.tmp" "$TOOLS/nats-server-$1"
}
nats210_install() { nats_install "$NATS210_VERSION"; }
nats215_install() { nats_install "$NATS215_VERSION"; }

# nats_ready PORT: JetStream answers on the monitoring port.
nats_ready() {
  local m=$(($1 + 1000)) reply
  exec 3<>"/dev/tcp/127.0.0.1/$m" || return 1
  printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  reply=$(head -n 1 <&3)
  exec 3>&-
  [[ $reply == *" 200 "* ]]
}
# nats_start NAME BINARY
nats_start() {
  local name=$1 bin=$2 p
  p=$(port "$name")
  nats_ready "$p" 2>/dev/null && return 0
  mkdir -p "$DIR/$name"
  cat >"$DIR/$name.conf" <<EOF
listen: 127.0.0.1:$p
http: 127.0.0.1:$((p + 1000))
server_name: baton_$name
jetstream {
  store_dir: "$DIR/$name"
  max_memory_store: 64MB
  max_file_store: 1GB
}
EOF
  daemon "$name" "$bin" -c "$DIR/$name.conf"
  wait_for "$name" 30 nats_ready "$p"
}
nats210_start() { nats_start nats210 "$(nats_bin "$NATS210_VERSION")"; }
nats215_start() { nats_start nats215 "$(nats_bin "$NATS215_VERSION")"; }
nats210_env() { echo "nats://127.0.0.1:$(port nats210)"; }
nats215_env() { echo "nats://127.0.0.1:$(port nats215)"; }
