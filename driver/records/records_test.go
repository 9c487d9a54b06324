package records_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/records"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mem"
)

// Each client opened here is a Store of its own over one in-memory table,
// as processes share a database: a wait across clients is woken by
// polling alone.
func TestConformancePolling(t *testing.T) {
	table := mem.New().Records()
	drivertest.Run(t, drivertest.Config{
		Open: func(testing.TB) driver.Store {
			return records.New(table, &records.Options{Poll: 20 * time.Millisecond})
		},
	})
}

func TestModel(t *testing.T) {
	table := mem.New().Records()
	drivertest.Model(t, drivertest.ModelConfig{
		Open: func(testing.TB) driver.Store { return records.New(table, nil) },
	})
}

// counting counts the calls of a Records.
type counting struct {
	records.Records
	scans, updates int
}

func (c *counting) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	c.updates++
	return c.Records.Update(ctx, names, fn)
}

func (c *counting) Scan(ctx context.Context, name, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	c.scans++
	return c.Records.Scan(ctx, name, prefix, fn)
}

// With ReadFirst, a request reads before it writes only once it is queued:
// before that, its Acquire changes the state in any case.
func TestReadFirst(t *testing.T) {
	ctx := context.Background()
	c := &counting{Records: mem.New().Records()}
	s := records.New(c, &records.Options{ReadFirst: true})
	req := func(owner string) *driver.Request {
		return &driver.Request{Name: "n", Owner: owner, Mode: driver.Exclusive, TTL: time.Minute, Queue: true, QueueTTL: time.Minute}
	}
	step := func(what string, r *driver.Request, granted bool, scans, updates int) {
		t.Helper()
		c.scans, c.updates = 0, 0
		_, err := s.Acquire(ctx, r)
		if granted && err != nil || !granted && !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("%s: Acquire = %v, want granted %v", what, err, granted)
		}
		if c.scans != scans || c.updates != updates {
			t.Errorf("%s: %d scans and %d updates, want %d and %d", what, c.scans, c.updates, scans, updates)
		}
	}
	a, b := req("a"), req("b")
	step("a free name", a, true, 0, 1)
	step("a request joining the queue", b, false, 0, 1)
	step("a queued request refused again", b, false, 1, 0)
	if _, err := s.Release(ctx, []driver.Key{{Name: "n", Owner: "a"}}); err != nil {
		t.Fatal(err)
	}
	step("a queued request granted", b, true, 1, 1)
	step("its owner asking again", b, true, 0, 1)
	step("a request queued behind it", a, false, 0, 1)
	if _, err := s.Release(ctx, []driver.Key{{Name: "n", Owner: "a"}}); err != nil {
		t.Fatal(err)
	}
	step("a request that left the queue", a, false, 0, 1)
}

func TestModelReadFirst(t *testing.T) {
	table := mem.New().Records()
	drivertest.Model(t, drivertest.ModelConfig{
		Open: func(testing.TB) driver.Store { return records.New(table, &records.Options{ReadFirst: true}) },
	})
}
