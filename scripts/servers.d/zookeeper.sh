# shellcheck shell=bash
# --- ZooKeeper 3.8 (Debian) and 3.9 (Maven Central), standalone -----------
# ZooKeeper 3.9 is resolved from Maven Central by maven/zookeeper39/pom.xml,
# with the metrics and snappy jars its pom marks provided (without them it
# crashes or answers "not currently serving requests").
server zookeeper38 ZOOKEEPER 2181
server zookeeper39 ZOOKEEPER 2182

zookeeper38_install() { apt_install zookeeper; }
zookeeper39_install() { maven_classpath "$HERE/servers.d/maven/zookeeper39" "$TOOLS/zookeeper39"; }

zk_ready() {
  (exec 3<>/dev/tcp/127.0.0.1/"$1" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null | grep -q '^Mode: standalone'
}
# zk_start NAME CLASSPATH
zk_start() {
  local name=$1 cp=$2 p
  p=$(port "$name")
  zk_ready "$p" && return 0
  mkdir -p "$DIR/$name"
  cat >"$DIR/$name.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$DIR/$name
clientPort=$p
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr,stat
maxSessionTimeout=60000
minSessionTimeout=1000
maxClientCnxns=0
CFG
  daemon "$name" java -Xmx256m -XX:+UseSerialGC -Dzookeeper.log.dir="$DIR/logs" -cp "$cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$DIR/$name.cfg"
  wait_for "$name" 60 zk_ready "$p"
}
zookeeper38_start() {
  zk_start zookeeper38 /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
}
zookeeper39_start() { zk_start zookeeper39 "$(cat "$TOOLS/zookeeper39/classpath.txt")"; }
zookeeper38_env() { echo "127.0.0.1:$(port zookeeper38)"; }
zookeeper39_env() { echo "127.0.0.1:$(port zookeeper39)"; }
