# shellcheck shell=bash
# --- etcd 3.4 (Debian) and 3.7 (built from the Go module proxy), one member
# etcd 3.7 is built once per machine (about a minute): a scratch module
# whose main calls the server's own etcdmain.Main, CGO off.
server etcd34 ETCD 2379
server etcd37 ETCD 2479

ETCD37_VERSION=v3.7.3
etcd37_bin() { echo "$TOOLS/etcd-$ETCD37_VERSION"; }

etcd34_install() { apt_install etcd-server etcd-client; }
etcd37_install() {
  apt_install etcd-client # etcdctl, for the readiness check
  [ -x "$(etcd37_bin)" ] && return 0
  command -v go >/dev/null || die "etcd $ETCD37_VERSION is built with Go, which is not on PATH"
  log "building etcd $ETCD37_VERSION from the Go module proxy (about a minute)"
  local b="$TOOLS/etcd-build"
  rm -rf "$b" && mkdir -p "$b"
  cat >"$b/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (
    cd "$b" && export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 &&
      go mod init etcdbuild && go get "go.etcd.io/etcd/server/v3@$ETCD37_VERSION" &&
      go build -o "$(etcd37_bin).tmp" .
  ) >"$DIR/logs/etcd37-build.log" 2>&1 || { tail -n 20 "$DIR/logs/etcd37-build.log" >&2; die "building etcd $ETCD37_VERSION failed"; }
  mv "$(etcd37_bin).tmp" "$(etcd37_bin)"
  rm -rf "$b"
}

etcd_ready() { ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$1" endpoint health >/dev/null 2>&1; }
# etcd_start NAME BINARY: one member; its peer port is the client port + 1.
etcd_start() {
  local name=$1 bin=$2 p
  p=$(port "$name")
  etcd_ready "$p" && return 0
  daemon "$name" "$bin" --name baton --data-dir "$DIR/$name" \
    --listen-client-urls "http://127.0.0.1:$p" --advertise-client-urls "http://127.0.0.1:$p" \
    --listen-peer-urls "http://127.0.0.1:$((p + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((p + 1))" \
    --initial-cluster "baton=http://127.0.0.1:$((p + 1))"
  wait_for "$name" 30 etcd_ready "$p"
}
etcd34_start() { etcd_start etcd34 "$(command -v etcd)"; }
etcd37_start() { etcd_start etcd37 "$(etcd37_bin)"; }
etcd34_env() { echo "127.0.0.1:$(port etcd34)"; }
etcd37_env() { echo "127.0.0.1:$(port etcd37)"; }
