package faultcheck_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-go/baton/faultcheck"
)

// TestMain lets the test binary serve as the harness's worker processes.
func TestMain(m *testing.M) {
	if faultcheck.IsWorker() {
		os.Exit(faultcheck.RunWorker())
	}
	os.Exit(m.Run())
}

// TestShort runs the harness briefly against every store, on the
// harness's own server instances, and prints the counts at the end.
func TestShort(t *testing.T) {
	script := os.Getenv("BATON_SERVERS")
	if script == "" {
		t.Fatal("BATON_SERVERS is not set: run scripts/test, or set BATON_SERVERS=$PWD/../scripts/servers (as root: it starts servers of its own in " + faultcheck.DefaultDir + ")")
	}
	d := 20 * time.Second
	if testing.Short() {
		d = 8 * time.Second
	}
	var results []*faultcheck.Result
	for _, s := range faultcheck.Stores {
		t.Run(s.Name, func(t *testing.T) {
			res, err := faultcheck.Run(context.Background(), faultcheck.Config{Store: s, Duration: d, Servers: script, Log: testWriter{t}})
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, res)
			for _, v := range res.Violations {
				t.Error("violation:", v)
			}
			for _, e := range res.Errors {
				t.Error("harness:", e)
			}
			if res.KnownRaces > 0 {
				t.Logf("%d workers found only a known data race inside the driver (faultcheck/races.go)", res.KnownRaces)
			}
			if res.Grants == 0 || res.FaultCount() == 0 {
				t.Errorf("nothing happened: %d grants, %d faults", res.Grants, res.FaultCount())
			}
		})
	}
	table := faultcheck.Table(results)
	t.Log("\n" + table)
	// go test shows a passing package's output only with -v: keep the
	// table where a CI run can print it.
	if err := os.WriteFile(filepath.Join(faultcheck.DefaultDir, "short-run.txt"), []byte(table), 0o644); err != nil {
		t.Error(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}
