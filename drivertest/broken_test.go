package drivertest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/mem"
)

// stealing grants every request at once by first releasing whoever holds.
type stealing struct{ *mem.Store }

func (s stealing) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	hs, _ := s.List(ctx, &driver.Filter{Name: req.Name})
	for _, h := range hs {
		if h.Owner != req.Owner {
			s.Release(ctx, []driver.Key{{Name: h.Name, Owner: h.Owner}})
		}
	}
	return s.Store.Acquire(ctx, req)
}

// staleTokens hands out the same token every time.
type staleTokens struct{ *mem.Store }

func (s staleTokens) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	if g != nil {
		g.Token = 7
	}
	return g, err
}

// deaf claims to wake waiters but never does: its Watch waits out its
// context.
type deaf struct{ *mem.Store }

func (deaf) Watch(context.Context, *driver.Request) (driver.Watch, error) { return deafWatch{}, nil }

type deafWatch struct{}

func (deafWatch) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (deafWatch) Close() error                   { return nil }

// TestSuiteCatchesBrokenStores runs the contention tests in a child process
// against stores that break the rules, and wants them to fail.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if kind := os.Getenv("DRIVERTEST_BROKEN"); kind != "" {
		Run(t, Config{Open: func(testing.TB) driver.Store {
			st := mem.Open("broken")
			switch kind {
			case "steal":
				return stealing{st}
			case "deaf":
				return deaf{st}
			}
			return staleTokens{st}
		}})
		return
	}
	for kind, want := range map[string]string{"steal": "overlap", "stale": "token", "deaf": "does not wake"} {
		test := "ContentionExclusive"
		if kind == "deaf" {
			test = "WokenByStore"
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesBrokenStores$/^"+test+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DRIVERTEST_BROKEN="+kind)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("the suite passed a store that breaks the rules (%s):\n%s", kind, out)
		} else if !strings.Contains(string(out), want) {
			t.Errorf("the suite failed the %s store, but not with %q:\n%s", kind, want, out)
		}
	}
}

// noQueue never queues a refused request: the FIFO rule broken.
type noQueue struct{ *mem.Store }

func (s noQueue) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	r := *req
	r.Queue = false
	return s.Store.Acquire(ctx, &r)
}

// TestModelOnMem checks mem, whose rules are lockstate's, against the
// model: the check itself must pass a correct store.
func TestModelOnMem(t *testing.T) {
	Model(t, ModelConfig{Open: func(testing.TB) driver.Store { return mem.Open("model") }})
}

// TestModelCatchesBrokenRules runs the model check in a child process on
// stores that break a rule, and wants it to fail.
func TestModelCatchesBrokenRules(t *testing.T) {
	if kind := os.Getenv("DRIVERTEST_BROKEN_MODEL"); kind != "" {
		Model(t, ModelConfig{Open: func(testing.TB) driver.Store {
			st := mem.Open("broken-model")
			if kind == "steal" {
				return stealing{st}
			}
			return noQueue{st}
		}})
		return
	}
	for kind, want := range map[string]string{"steal": "the model", "noqueue": "queued"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestModelCatchesBrokenRules$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DRIVERTEST_BROKEN_MODEL="+kind)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("the model check passed a store that breaks the rules (%s):\n%s", kind, out)
		} else if !strings.Contains(string(out), want) {
			t.Errorf("the model check failed the %s store, but not with %q:\n%s", kind, want, out)
		}
	}
}
