package drivertest

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Server is one server a store's tests run against.
type Server struct {
	Name string // names the server and its version ("postgres18"); the subtest's name
	URL  string // what the store's tests connect to
}

// label is a server name: letters, digits, dots, dashes, underscores.
var label = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Servers parses the environment variable env: space-separated NAME=URL
// entries (as scripts/servers env prints them), or a single URL, named
// "default". It returns nil if env is unset or empty.
func Servers(env string) []Server {
	var out []Server
	for _, f := range strings.Fields(os.Getenv(env)) {
		name, url, ok := strings.Cut(f, "=")
		if !ok || !label.MatchString(name) {
			name, url = "default", f
		}
		out = append(out, Server{Name: name, URL: url})
	}
	return out
}

// EachServer runs f once per server that env lists, as a subtest named by
// the server; within it, ServerOf tells which server that is. It fails t
// when env lists none: a store test never skips for want of a server.
func EachServer(t *testing.T, env string, f func(t *testing.T, s Server)) {
	t.Helper()
	ss := Servers(env)
	if len(ss) == 0 {
		t.Fatalf("%s is not set: run `scripts/servers up` and `eval \"$(scripts/servers env)\"` from the repository root (scripts/test does both)", env)
	}
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) { f(t, s) })
	}
}

// ServerOf returns the server of the EachServer subtest that t is (or
// runs within): the element of t's name after the top-level test's.
func ServerOf(t testing.TB, env string) Server {
	t.Helper()
	s, err := serverOf(t.Name(), Servers(env))
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return s
}

func serverOf(testName string, ss []Server) (Server, error) {
	parts := strings.Split(testName, "/")
	if len(parts) > 1 {
		for _, s := range ss {
			if s.Name == parts[1] {
				return s, nil
			}
		}
	}
	return Server{}, fmt.Errorf("test %s does not run within drivertest.EachServer", testName)
}
