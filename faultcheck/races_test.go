package faultcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOnlyKnownRaces(t *testing.T) {
	// A real report from a ZooKeeper worker (go-zookeeper's lastZxid).
	zk, err := os.ReadFile("testdata/zk-race.log")
	if err != nil {
		t.Fatal(err)
	}
	// The same report with the write in baton's own code instead.
	ours := strings.Replace(string(zk), "github.com/go-zookeeper/zk.(*Conn).recvLoop()", "github.com/baton-go/baton/zookeeper.(*Store).dial()", 1)
	dir := t.TempDir()
	write := func(name string, parts ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(parts, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := "1h19m37.645s pid 29592: released x token 817\n"
	for _, tc := range []struct {
		name   string
		path   string
		offset int64
		want   bool
	}{
		{"known race", write("a", before, string(zk)), 0, true},
		{"known race twice", write("b", before, string(zk), before, string(zk)), 0, true},
		{"no race", write("c", before), 0, false},
		{"a race in baton's code", write("d", before, ours), 0, false},
		{"a known race and one in baton's code", write("e", string(zk), ours), 0, false},
		{"a race before this process's part only", write("f", string(zk), before), int64(len(zk)), false},
		{"a race in an earlier process's part", write("g", ours, string(zk)), int64(len(ours)), true},
		{"no log", filepath.Join(dir, "none"), 0, false},
	} {
		if got := onlyKnownRaces(tc.path, tc.offset); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
