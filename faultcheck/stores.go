package faultcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	// Every store the harness can run, by URL scheme. A new store is one
	// import here and one entry in Stores.
	_ "github.com/baton-go/baton/elastic"
	_ "github.com/baton-go/baton/etcd"
	_ "github.com/baton-go/baton/mongo"
	_ "github.com/baton-go/baton/mysql"
	_ "github.com/baton-go/baton/postgres"
	_ "github.com/baton-go/baton/redis"
	_ "github.com/baton-go/baton/spanner"
	_ "github.com/baton-go/baton/sqlite"
	_ "github.com/baton-go/baton/zookeeper"

	"cloud.google.com/go/spanner/spannertest"

	batonspanner "github.com/baton-go/baton/spanner"
)

const spannerDB = "projects/faultcheck/instances/faultcheck/databases/faultcheck"

// startSpannerFake starts the official client's in-process fake, once per
// process, and creates the lock table.
var startSpannerFake = func() func(ctx context.Context) (string, error) {
	var once sync.Once
	var addr string
	var err error
	return func(ctx context.Context) (string, error) {
		once.Do(func() {
			var srv *spannertest.Server
			if srv, err = spannertest.NewServer("127.0.0.1:0"); err != nil {
				return
			}
			srv.SetLogger(func(string, ...any) {})
			addr = srv.Addr
			// The harness's own client (which creates the table) goes
			// straight to it; workers get their proxy's address.
			if err = os.Setenv("SPANNER_EMULATOR_HOST", addr); err == nil {
				err = batonspanner.CreateTable(ctx, spannerDB, batonspanner.DefaultTable)
			}
		})
		return addr, err
	}
}()

// Store is one store the harness knows how to run.
type Store struct {
	Name string // what -store takes
	// Server is the server's name in scripts/servers; empty for an
	// embedded store, which gets no proxy and no restart (its faults are
	// kills and pauses of the processes sharing it).
	Server string
	// PortVar is the variable scripts/servers reads the server's port
	// from, and Port the port of the harness's own instance, away from the
	// shared one on the default port that other tests use.
	PortVar string
	Port    int
	// URL is the store's URL for a client that reaches the server at addr
	// (host:port: its proxy), with leases (or sessions) of ttl. dir is the
	// run's directory, for embedded stores.
	URL func(addr, dir string, ttl time.Duration) string
	// ServerEnv is more environment for scripts/servers: settings the
	// harness's instance needs (the server is restarted with them when a
	// run begins).
	ServerEnv []string
	// Start, for a store whose server runs inside the harness's process (a
	// fake), starts it and returns its address: it gets proxies but no
	// restart (the fake keeps its data in memory).
	Start func(ctx context.Context) (addr string, err error)
	// Env is more environment for a worker that reaches the server at
	// addr, for stores that take their endpoint from there.
	Env func(addr string) []string
	// TimeNS says workers may run in a time namespace whose monotonic and
	// boot clocks are offset from the machine's.
	TimeNS bool
}

// Stores is the table of stores, in the order TestShort runs them.
var Stores = []Store{
	{Name: "sqlite", TimeNS: true, URL: func(_, dir string, _ time.Duration) string {
		return "sqlite://" + filepath.Join(dir, "sqlite", "faultcheck.db")
	}},
	{Name: "postgres", Server: "postgres", PortVar: "BATON_PG_PORT", Port: 25432, TimeNS: true,
		URL: func(addr, _ string, _ time.Duration) string {
			return "postgres://postgres@" + addr + "/baton_test?sslmode=disable&connect_timeout=2"
		}},
	{Name: "mysql", Server: "mariadb", PortVar: "BATON_MYSQL_PORT", Port: 23306, TimeNS: true,
		URL: func(addr, _ string, _ time.Duration) string {
			return "mysql://baton:baton@" + addr + "/baton_test?timeout=2s"
		}},
	// Redis with an fsynced append-only file: without persistence a
	// restart forgets every fencing counter, and tokens repeat.
	{Name: "redis", Server: "redis", PortVar: "BATON_REDIS_PORT", Port: 26379, TimeNS: true,
		ServerEnv: []string{"BATON_REDIS_ARGS=--appendonly yes --appendfsync always"},
		URL: func(addr, _ string, _ time.Duration) string {
			return "redis://" + addr + "/0?dial_timeout=2s"
		}},
	{Name: "etcd", Server: "etcd", PortVar: "BATON_ETCD_PORT", Port: 22379, TimeNS: true,
		URL: func(addr, _ string, ttl time.Duration) string {
			return fmt.Sprintf("etcd://%s/faultcheck?session_ttl=%s&dial_timeout=2s", addr, ttl)
		}},
	{Name: "mongo", Server: "ferretdb", PortVar: "BATON_FERRETDB_PORT", Port: 27027, TimeNS: true,
		URL: func(addr, _ string, _ time.Duration) string {
			return "mongodb://" + addr + "/faultcheck?collection=locks&directConnection=true&connectTimeoutMS=2000&serverSelectionTimeoutMS=5000"
		}},
	{Name: "opensearch", Server: "opensearch", PortVar: "BATON_OPENSEARCH_PORT", Port: 29200, TimeNS: true,
		ServerEnv: []string{"BATON_OPENSEARCH_TRANSPORT_PORT=29300"},
		URL: func(addr, _ string, _ time.Duration) string {
			return "opensearch://" + addr + "/faultcheck?timeout=5s"
		}},
	{Name: "spanner", Start: startSpannerFake, TimeNS: true,
		Env: func(addr string) []string { return []string{"SPANNER_EMULATOR_HOST=" + addr} },
		URL: func(string, string, time.Duration) string {
			return "spanner://" + spannerDB + "?table=" + batonspanner.DefaultTable + "&poll=25ms"
		}},
	{Name: "zookeeper", Server: "zookeeper", PortVar: "BATON_ZK_PORT", Port: 22181, TimeNS: true,
		URL: func(addr, _ string, ttl time.Duration) string {
			return fmt.Sprintf("zk://%s/faultcheck?session_timeout=%s", addr, ttl)
		}},
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
