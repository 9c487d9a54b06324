package mysql_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
)

type spy struct {
	driver.Store
	w   driver.Waiter
	mu  sync.Mutex
	log []string
	t0  time.Time
}

func (s *spy) note(f string) {
	s.mu.Lock()
	s.log = append(s.log, time.Since(s.t0).Round(time.Microsecond).String()+" "+f)
	s.mu.Unlock()
}
func (s *spy) Acquire(ctx context.Context, r *driver.Request) (*driver.Grant, error) {
	s.note("acquire>")
	g, err := s.Store.Acquire(ctx, r)
	s.note("acquire< " + map[bool]string{true: "granted", false: "refused"}[err == nil])
	return g, err
}
func (s *spy) Watch(ctx context.Context, r *driver.Request) (driver.Watch, error) {
	s.note("watch")
	w, err := s.w.Watch(ctx, r)
	return &spyWatch{w, s}, err
}

type spyWatch struct {
	driver.Watch
	s *spy
}

func (w *spyWatch) Wait(ctx context.Context) error {
	w.s.note("wait>")
	err := w.Watch.Wait(ctx)
	w.s.note("wait<")
	return err
}
func (w *spyWatch) Replay(t time.Time) bool { return w.Watch.(driver.Replayer).Replay(t) }

func TestTmpHandoff(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		a := client(t, open(t, tb), nil)
		st := open(t, tb)
		sp := &spy{Store: st, w: st}
		b := client(t, sp, nil)
		var hs []time.Duration
		for i := range 30 {
			la, err := a.Lock(ctx, "ho", nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				lb, err := b.Lock(ctx, "ho", nil)
				got <- time.Now()
				if err == nil {
					lb.Release(ctx)
				}
			}()
			time.Sleep(20 * time.Millisecond)
			sp.mu.Lock()
			sp.log = nil
			sp.t0 = time.Now()
			sp.mu.Unlock()
			start := time.Now()
			la.Release(ctx)
			sp.note("released")
			g := <-got
			hs = append(hs, g.Sub(start))
			time.Sleep(5 * time.Millisecond)
			if i == 29 || i == 15 {
				sp.mu.Lock()
				t.Log(sp.log)
				sp.mu.Unlock()
			}
		}
		slices.Sort(hs)
		t.Logf("hand-off p50 %v", hs[len(hs)/2])
		_ = baton.ErrLocked
	})
}
