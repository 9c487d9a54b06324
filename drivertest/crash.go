package drivertest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// ServerCommand runs scripts/servers (the BATON_SERVERS variable, or
// ../scripts/servers from a store's package) with args followed by the
// name of the server of the EachServer subtest t, and fails t if it fails.
func ServerCommand(t *testing.T, env string, args ...string) {
	t.Helper()
	script := os.Getenv("BATON_SERVERS")
	if script == "" {
		script = "../scripts/servers"
	}
	srv := ServerOf(t, env).Name
	out, err := exec.Command(script, append(args, srv)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s %s: %v\n%s", script, strings.Join(args, " "), srv, err, out)
	}
}

// CrashConfig configures Crash.
type CrashConfig struct {
	// Env names the variable that lists the servers (see EachServer).
	Env string
	// Open returns a new store of the table under test.
	Open func(t testing.TB) driver.Store
	// BeforeCrash, if set, runs once the holds are taken, just before the
	// crash; AfterGrace, at the end, with the time of the crash.
	BeforeCrash func(ctx context.Context, t *testing.T)
	AfterGrace  func(ctx context.Context, t *testing.T, crashed time.Time)
}

// Crash kills t's server (scripts/servers crash: no clean shutdown)
// during holds whose grants did not wait for the disk, and starts it
// again. Whatever the crash forgot: a holder whose grant was forgotten is
// told its lease is lost before anyone else is granted the name; nobody is
// granted anything before the grace period (the longest TTL, 2s here) has
// run from the crash; and every token after the crash is above every
// token before.
func Crash(t *testing.T, cfg CrashConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	newClient := func() *baton.Client {
		c, err := baton.New(cfg.Open(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := newClient()
	ttl := 2 * time.Second
	o := &baton.LockOptions{TTL: ttl}

	// Tokens handed out on one name, up to the crash.
	var last uint64
	for range 30 {
		l, err := a.Lock(ctx, "crash/burst", o)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		l.Release(ctx)
	}
	la, err := a.Lock(ctx, "crash/held", o)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BeforeCrash != nil {
		cfg.BeforeCrash(ctx, t)
	}
	ServerCommand(t, cfg.Env, "crash")
	// The grace period starts with the first call the new incarnation
	// serves: a's keepalive may make it before "up" returns.
	crashed := time.Now()
	ServerCommand(t, cfg.Env, "up")
	restarted := time.Now()

	b := newClient()
	bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
	lb, err := b.Lock(bctx, "crash/held", o)
	bcancel()
	if err != nil && la.Err() == nil {
		// a's grant was flushed before the crash (a loaded machine is
		// slow to crash the server): the new incarnation remembers it, so
		// a keeps renewing it, as it should, and b waits.
		t.Logf("a's grant outlived the crash; b waits until a releases")
		la.Release(ctx)
		lb, err = b.Lock(ctx, "crash/held", o)
	}
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	t.Logf("b granted %v after the restart; a's lease: %v", granted.Sub(restarted), la.Err())
	select {
	case <-la.Done():
	default:
		t.Fatalf("b was granted while a still held: a's Err %v", la.Err())
	}
	if d := granted.Sub(crashed); d < ttl {
		t.Errorf("b was granted %v after the crash, within the grace period (%v)", d, ttl)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("b's token %#x is not above a's %#x", lb.Token(), la.Token())
	}
	lb.Release(ctx)
	l, err := b.Lock(ctx, "crash/burst", o)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= last {
		t.Errorf("token %#x after the crash is not above the last one before it, %#x", l.Token(), last)
	}
	l.Release(ctx)
	if cfg.AfterGrace != nil {
		cfg.AfterGrace(ctx, t, crashed)
	}
}

// SessionCrashConfig configures SessionCrash.
type SessionCrashConfig struct {
	// Env names the variable that lists the servers (see EachServer).
	Env string
	// Open returns a new store of the table under test.
	Open func(t testing.TB) driver.Store
	// Bound, if set, returns how many of names the store has bound to a
	// session: the test then checks that its holds are.
	Bound func(t testing.TB, names []string) int
}

// SessionCrash crashes t's server (scripts/servers crash) while a client
// holds leases that only its session keeps (past their own TTL, one
// exclusive and one shared): the crash forgets the session, the holder is
// told when renewing it, and no other client is granted a name before the
// holder's lease ended and the grace period passed; its token is larger.
func SessionCrash(t *testing.T, cfg SessionCrashConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	newClient := func(st driver.Store, o *baton.Options) *baton.Client {
		c, err := baton.New(st, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ttl := 2 * time.Second
	st := cfg.Open(t)
	a := newClient(st, &baton.Options{TTL: ttl})
	WaitSession(t, ctx, st, ttl)
	lock := func(name string, o *baton.LockOptions) *baton.Lease {
		l, err := a.TryLock(ctx, name, o)
		if err != nil {
			t.Fatalf("TryLock %s: %v", name, err)
		}
		return l
	}
	lock("crash/first", nil) // then the client holds another lease: the next go in its session
	la := lock("crash/held", nil)
	ls := lock("crash/shared", &baton.LockOptions{Shared: true})
	time.Sleep(ttl + ttl/2) // past their own TTL: their session keeps them
	if la.Err() != nil || ls.Err() != nil {
		t.Fatalf("leases in a session lost before the crash: %v, %v", la.Err(), ls.Err())
	}
	if cfg.Bound != nil {
		if n := cfg.Bound(t, []string{la.Name(), ls.Name()}); n != 2 {
			t.Fatalf("holds in a session: %d, want 2", n)
		}
	}
	ServerCommand(t, cfg.Env, "crash")
	crashed := time.Now()
	ServerCommand(t, cfg.Env, "up")
	b := newClient(cfg.Open(t), nil)
	for _, l := range []*baton.Lease{la, ls} {
		lb, err := b.Lock(ctx, l.Name(), nil)
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		select {
		case <-l.Done():
		default:
			t.Errorf("%s granted to another while its holder still held it", l.Name())
		}
		if d := granted.Sub(crashed); d < ttl {
			t.Errorf("%s granted %v after the crash, within the grace period (%v)", l.Name(), d, ttl)
		}
		if lb.Token() <= l.Token() {
			t.Errorf("%s: token %#x after the crash, not above %#x", l.Name(), lb.Token(), l.Token())
		}
		lb.Release(ctx)
	}
}
