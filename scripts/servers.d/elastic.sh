# shellcheck shell=bash
# --- Elasticsearch 7.10 and OpenSearch 2.19, one node in one JVM each -----
# Neither has a Debian package: a tiny Maven project per server
# (maven/NAME: a pom.xml and Node.java) depends on codelibs' runner from
# Maven Central, which starts a real node (Painless, the REST layer; no
# security plugin) inside one JVM. Maven resolves it once; later starts run
# java on the saved classpath directly (4–8 s to yellow on 2 cores).
# Elasticsearch 7.10.2 is the last Apache-2.0 release, and the newest with a
# runnable node on Maven Central.
server opensearch2 ELASTIC 9200
server elasticsearch7 ELASTIC 9201

# es_transport NAME: the transport port, the HTTP port + 100 (9300, 9301).
es_transport() { echo $(($(port "$1") + 100)); }

opensearch2_install() { maven_classpath "$HERE/servers.d/maven/opensearch2" "$TOOLS/opensearch2"; }
elasticsearch7_install() { maven_classpath "$HERE/servers.d/maven/elasticsearch7" "$TOOLS/elasticsearch7"; }

es_ready() {
  curl -sf --max-time 2 "http://127.0.0.1:$1/_cluster/health" 2>/dev/null | grep -Eq '"status":"(green|yellow)"'
}
# es_start NAME TOOLDIR
es_start() {
  local name=$1 tool=$2 p
  p=$(port "$name")
  es_ready "$p" && return 0
  mkdir -p "$DIR/$name"
  daemon "$name" java -Xms256m -Xmx512m -XX:+UseSerialGC -Djava.awt.headless=true \
    -cp "$tool/classes:$(cat "$tool/classpath.txt")" Node "$DIR/$name" "$p" "$(es_transport "$name")"
  wait_for "$name" 120 es_ready "$p"
}
opensearch2_start() { es_start opensearch2 "$TOOLS/opensearch2"; }
elasticsearch7_start() { es_start elasticsearch7 "$TOOLS/elasticsearch7"; }
opensearch2_env() { echo "http://127.0.0.1:$(port opensearch2)"; }
elasticsearch7_env() { echo "http://127.0.0.1:$(port elasticsearch7)"; }
