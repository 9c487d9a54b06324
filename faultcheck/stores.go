package faultcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	// Every store the harness can run, by URL scheme. A new store is one
	// import here and one entry in Stores.
	_ "github.com/baton-go/baton/elastic"
	_ "github.com/baton-go/baton/etcd"
	_ "github.com/baton-go/baton/mongo"
	_ "github.com/baton-go/baton/mysql"
	_ "github.com/baton-go/baton/nats"
	_ "github.com/baton-go/baton/postgres"
	_ "github.com/baton-go/baton/redis"
	_ "github.com/baton-go/baton/spanner"
	_ "github.com/baton-go/baton/sqlite"
	_ "github.com/baton-go/baton/zookeeper"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	batonspanner "github.com/baton-go/baton/spanner"
)

const spannerDB = "projects/faultcheck/instances/faultcheck/databases/faultcheck"

// spannerSetup creates the emulator's instance, database and lock table
// (the emulator keeps nothing across restarts, so the harness never
// restarts it).
func spannerSetup(ctx context.Context, addr string) error {
	if err := os.Setenv("SPANNER_EMULATOR_HOST", addr); err != nil {
		return err
	}
	return batonspanner.CreateTable(ctx, spannerDB, nil)
}

// mongoSetup drops the lock collection that an earlier run (perhaps of an
// earlier version of the store) left on the harness's server.
func mongoSetup(ctx context.Context, addr string) error {
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/?directConnection=true&serverSelectionTimeoutMS=20000"))
	if err != nil {
		return err
	}
	defer c.Disconnect(context.WithoutCancel(ctx))
	return c.Database("faultcheck").Collection("locks").Drop(ctx)
}

// Store is one server of a store that the harness knows how to run.
type Store struct {
	// Name is what -store takes: the server's name in scripts/servers,
	// which names its version too (postgres18), or the store's for an
	// embedded store.
	Name string
	// Server is the server's name in scripts/servers; empty for an
	// embedded store, which gets no proxy and no restart (its faults are
	// kills and pauses of the processes sharing it).
	Server string
	// Port is the port of the harness's own instance, away from the
	// shared one that other tests use (scripts/servers reads it from
	// BATON_PORT_<SERVER>).
	Port int
	// URL is the store's URL for a client that reaches the server at addr
	// (host:port: its proxy), with leases (or sessions) of ttl. dir is the
	// run's directory, for embedded stores.
	URL func(addr, dir string, ttl time.Duration) string
	// ServerEnv is more environment for scripts/servers: settings the
	// harness's instance needs (the server is restarted with them when a
	// run begins).
	ServerEnv []string
	// NoRestart: the server keeps nothing across a restart (the Spanner
	// emulator), so the run does not restart it.
	NoRestart bool
	// Setup, if set, prepares the server at addr once it runs (creating
	// what a store cannot create itself).
	Setup func(ctx context.Context, addr string) error
	// Env is more environment for a worker that reaches the server at
	// addr, for stores that take their endpoint from there.
	Env func(addr string) []string
	// TimeNS says workers may run in a time namespace whose monotonic and
	// boot clocks are offset from the machine's.
	TimeNS bool
}

// URLs of the stores, by the address of the server (its proxy). The SQL
// stores reclaim idle names every 2 s, so that the rows of the harness's
// names come and go between their uses, under the faults.
func pgURL(addr, _ string, _ time.Duration) string {
	return "postgres://postgres@" + addr + "/baton_test?sslmode=disable&connect_timeout=2&baton_reclaim=2s"
}
func mysqlURL(addr, _ string, _ time.Duration) string {
	// A table of its own: a table keeps the mode it was made with, and a
	// harness directory may have the durable one of an earlier version.
	return "mysql://baton:baton@" + addr + "/baton_test?timeout=2s&baton_reclaim=2s&baton_table=baton_fast"
}
func redisURL(addr, _ string, _ time.Duration) string {
	return "redis://" + addr + "/0?dial_timeout=2s"
}
func etcdURL(addr, _ string, ttl time.Duration) string {
	return fmt.Sprintf("etcd://%s/faultcheck?session_ttl=%s&dial_timeout=2s", addr, ttl)
}
func mongoURL(addr, _ string, _ time.Duration) string {
	return "mongodb://" + addr + "/faultcheck?collection=locks&directConnection=true&connectTimeoutMS=2000&serverSelectionTimeoutMS=5000"
}
func elasticURL(scheme string) func(addr, _ string, _ time.Duration) string {
	return func(addr, _ string, _ time.Duration) string { return scheme + "://" + addr + "/faultcheck?timeout=5s" }
}
func natsURL(addr, _ string, _ time.Duration) string {
	return "nats://" + addr + "/faultcheck?timeout=2s"
}
func zkURL(addr, _ string, ttl time.Duration) string {
	return fmt.Sprintf("zk://%s/faultcheck?session_timeout=%s", addr, ttl)
}

// redisAOF: Redis with an fsynced append-only file; without persistence
// a restart forgets every fencing counter, and tokens repeat.
var redisAOF = []string{"BATON_REDIS_ARGS=--appendonly yes --appendfsync always"}

// Stores is the table of stores' servers, every version the tests run,
// in the order TestShort runs them.
var Stores = []Store{
	{Name: "sqlite", TimeNS: true, URL: func(_, dir string, _ time.Duration) string {
		return "sqlite://" + filepath.Join(dir, "sqlite", "faultcheck.db") + "?reclaim=2s"
	}},
	{Name: "postgres15", Server: "postgres15", Port: 25432, TimeNS: true, URL: pgURL},
	{Name: "postgres18", Server: "postgres18", Port: 25433, TimeNS: true, URL: pgURL},
	{Name: "mariadb10", Server: "mariadb10", Port: 23306, TimeNS: true, URL: mysqlURL},
	{Name: "mysql8", Server: "mysql8", Port: 23307, TimeNS: true, URL: mysqlURL},
	{Name: "redis7", Server: "redis7", Port: 26379, TimeNS: true, ServerEnv: redisAOF, URL: redisURL},
	{Name: "valkey9", Server: "valkey9", Port: 26380, TimeNS: true, ServerEnv: redisAOF, URL: redisURL},
	{Name: "etcd34", Server: "etcd34", Port: 22379, TimeNS: true, URL: etcdURL},
	{Name: "etcd37", Server: "etcd37", Port: 22479, TimeNS: true, URL: etcdURL},
	{Name: "mongodb6", Server: "mongodb6", Port: 27027, TimeNS: true, Setup: mongoSetup, URL: mongoURL},
	{Name: "opensearch2", Server: "opensearch2", Port: 29200, TimeNS: true, URL: elasticURL("opensearch")},
	{Name: "elasticsearch7", Server: "elasticsearch7", Port: 29201, TimeNS: true, URL: elasticURL("elasticsearch")},
	{Name: "spanner", Server: "emulator", Port: 29010, TimeNS: true, NoRestart: true, Setup: spannerSetup,
		Env: func(addr string) []string { return []string{"SPANNER_EMULATOR_HOST=" + addr} },
		URL: func(string, string, time.Duration) string {
			return "spanner://" + spannerDB + "?table=" + batonspanner.DefaultTable + "&poll=25ms"
		}},
	{Name: "nats210", Server: "nats210", Port: 24222, TimeNS: true, URL: natsURL},
	{Name: "nats215", Server: "nats215", Port: 24223, TimeNS: true, URL: natsURL},
	{Name: "zookeeper38", Server: "zookeeper38", Port: 22181, TimeNS: true, URL: zkURL},
	{Name: "zookeeper39", Server: "zookeeper39", Port: 22182, TimeNS: true, URL: zkURL},
}

// StoreNamed returns the entry of Stores called name.
func StoreNamed(name string) (Store, bool) {
	for _, s := range Stores {
		if s.Name == name {
			return s, true
		}
	}
	return Store{}, false
}
