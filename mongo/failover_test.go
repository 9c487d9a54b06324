package mongo_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

// TestStepDown steps the primary of the three-member replica set down
// while a client holds a lock and another waits for it: the holder keeps
// its lease or is told it lost it before the waiter is granted, the
// waiter's token is larger, and the next token after the failover larger
// still. Then the set is brought back to its first primary.
func TestStepDown(t *testing.T) {
	var srv drivertest.Server
	for _, s := range drivertest.Servers(serversEnv) {
		if s.Name == "mongodb6rs3" {
			srv = s
		}
	}
	if srv.URL == "" {
		t.Fatalf("%s lists no mongodb6rs3 (the three-member replica set): run `scripts/servers up`", serversEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admin, err := mongo.Connect(options.Client().ApplyURI(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Disconnect(context.Background())
	first := primary(ctx, t, admin, "")

	newClient := func() *baton.Client {
		s, err := batonmongo.Open(ctx, srv.URL, &batonmongo.Options{Collection: collection})
		if err != nil {
			t.Fatal(err)
		}
		c, err := baton.New(s, &baton.Options{TTL: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := newClient(), newClient()
	name := "stepdown/" + collection
	la, err := a.TryLock(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		l  *baton.Lease
		at time.Time
	}
	got := make(chan grant, 1)
	go func() {
		lb, err := b.Lock(ctx, name, nil)
		if err != nil {
			t.Errorf("waiter: %v", err)
			close(got)
			return
		}
		got <- grant{lb, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is queued

	// Step down; the command's connection may be closed under it.
	err = admin.Database("admin").RunCommand(ctx, bson.D{{Key: "replSetStepDown", Value: 10}, {Key: "secondaryCatchUpPeriodSecs", Value: 5}}).Err()
	t.Logf("replSetStepDown: %v", err)
	second := primary(ctx, t, admin, first)
	t.Logf("primary %s → %s", first, second)

	// The holder holds on through the failover, or learns it lost the lease;
	// the waiter is not granted meanwhile.
	var end time.Time
	select {
	case <-la.Done():
		end = time.Now()
		t.Logf("the holder lost its lease during the failover: %v", la.Err())
	case g := <-got:
		t.Fatalf("the waiter was granted (token %d) while the holder's lease was live", g.l.Token())
	case <-time.After(2 * time.Second):
		end = time.Now()
		if err := la.ReleaseStrict(ctx); err != nil {
			t.Fatalf("release after the failover: %v", err)
		}
	}
	g, ok := <-got
	if !ok {
		return
	}
	if g.at.Before(end) {
		t.Errorf("the waiter was granted %v before the holder's lease ended", end.Sub(g.at))
	}
	if g.l.Token() <= la.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", g.l.Token(), la.Token())
	}
	if err := g.l.ReleaseStrict(ctx); err != nil {
		t.Fatalf("the waiter's release: %v", err)
	}
	l, err := a.TryLock(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= g.l.Token() {
		t.Errorf("the token after the failover %d is not above %d", l.Token(), g.l.Token())
	}
	l.Release(ctx)

	// The first member has the highest priority: it takes the primary back
	// once its 10 s stepdown period is over. Wait for that, so that later
	// tests do not see a failover.
	if p := primary(ctx, t, admin, second); p != first {
		t.Logf("primary %s, not %s, after the takeover", p, first)
	}
}

// primary waits for a writable primary other than not, and returns it.
func primary(ctx context.Context, t *testing.T, c *mongo.Client, not string) string {
	t.Helper()
	for {
		var h struct {
			Primary  string `bson:"primary"`
			Writable bool   `bson:"isWritablePrimary"`
		}
		err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&h)
		if err == nil && h.Primary != "" && h.Primary != not {
			return h.Primary
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no primary other than %q: %v", not, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
