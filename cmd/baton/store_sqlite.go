package main

// The stores baton knows: mem:// and SQLite, the default, always; the
// others only in a build that names them, so that a first `go run` builds
// a small program (go build -tags postgres,redis, or -tags all):
//
//	go install -tags all github.com/baton-go/baton/cmd/baton@latest
import _ "github.com/baton-go/baton/sqlite"

// storeTags maps the URL schemes of the other stores to the build tag that
// adds them, for the message that names it.
var storeTags = map[string]string{
	"postgres": "postgres", "postgresql": "postgres",
	"mysql": "mysql", "mariadb": "mysql",
	"redis": "redis", "rediss": "redis",
	"etcd": "etcd", "etcds": "etcd",
	"zk":      "zookeeper",
	"mongodb": "mongo", "mongodb+srv": "mongo",
	"elasticsearch": "elastic", "opensearch": "elastic", "elasticsearch+https": "elastic", "opensearch+https": "elastic",
	"spanner": "spanner",
	"nats":    "nats", "nats+tls": "nats",
}

// buildHint says how to build a baton that knows scheme, if one can.
func buildHint(scheme string) string {
	if tag, ok := storeTags[scheme]; ok {
		return "; this build leaves that store out: install baton with -tags " + tag + " (or -tags all)"
	}
	return ""
}
