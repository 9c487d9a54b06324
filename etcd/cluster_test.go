package etcd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
	batonetcd "github.com/baton-go/baton/etcd"
)

// member is one etcd process of a test cluster.
type member struct {
	name   string
	client string // host:port
	cmd    *exec.Cmd
	exited chan struct{}
}

// startCluster starts a three-member etcd cluster on 127.0.0.1 (client
// ports 23790, 23792, 23794; peer ports one above), from Debian's etcd
// binary, with data under t.TempDir(); the test's cleanup stops it.
func startCluster(t *testing.T) []*member {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal("no etcd binary: run `scripts/servers up etcd` (it installs Debian's etcd-server)")
	}
	dir := t.TempDir()
	const base = 23790
	var ms []*member
	var initial []string
	for i := 0; i < 3; i++ {
		m := &member{name: fmt.Sprint("m", i), client: fmt.Sprintf("127.0.0.1:%d", base+2*i)}
		for _, port := range []int{base + 2*i, base + 2*i + 1} {
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
				t.Fatalf("port %d is taken (another cluster test running?): %v", port, err)
			} else {
				l.Close()
			}
		}
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.1:%d", m.name, base+2*i+1))
		ms = append(ms, m)
	}
	token := fmt.Sprintf("baton-test-%d", time.Now().UnixNano())
	for i, m := range ms {
		peer := fmt.Sprintf("http://127.0.0.1:%d", base+2*i+1)
		log, err := os.Create(filepath.Join(dir, m.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin, "--name", m.name, "--data-dir", filepath.Join(dir, m.name),
			"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--heartbeat-interval", "50", "--election-timeout", "500")
		m.cmd.Stdout, m.cmd.Stderr = log, log
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m.exited = make(chan struct{})
		go func() { m.cmd.Wait(); log.Close(); close(m.exited) }()
		t.Cleanup(func() { m.stop() })
	}
	// Ready when every member knows the leader.
	cli := rawClient(t, ms)
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range ms {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.client)
			cancel()
			if err == nil && st.Leader != 0 {
				break
			}
			if time.Now().After(deadline) {
				logs, _ := os.ReadFile(filepath.Join(dir, m.name+".log"))
				t.Fatalf("member %s not ready: %v\n%s", m.name, err, tail(string(logs), 2000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return ms
}

func (m *member) stop() {
	select {
	case <-m.exited:
		return
	default:
	}
	m.cmd.Process.Kill()
	<-m.exited
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func endpoints(ms []*member) string {
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	return strings.Join(eps, ",")
}

func rawClient(t *testing.T, ms []*member) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints(ms), ","),
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// leader returns the member that leads the cluster now.
func leader(t *testing.T, cli *clientv3.Client, ms []*member) *member {
	t.Helper()
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, m.client)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	t.Fatal("no member leads")
	return nil
}

// While a lock is held and others wait, the leader dies: the hold either
// survives (the new leader keeps the lease) or is reported lost before
// anyone else is granted; never two holders at once.
func TestClusterLeaderLoss(t *testing.T) {
	ms := startCluster(t)
	cli := rawClient(t, ms)
	ctx := ctxFor(t, 60*time.Second)
	openC := func() *baton.Client {
		st, err := batonetcd.Open(ctx, endpoints(ms), &batonetcd.Options{Prefix: "/cluster/", SessionTTL: sessionTTL})
		if err != nil {
			t.Fatal(err)
		}
		return client(t, st)
	}
	const waiters = 3
	holder := openC()
	cs := make([]*baton.Client, waiters)
	for i := range cs {
		cs[i] = openC()
	}
	n := "leader-loss"
	h := &drivertest.History{}

	call := time.Now()
	l, err := holder.Lock(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	type res struct {
		i          int
		l          *baton.Lease
		call, when time.Time
		err        error
	}
	got := make(chan res, waiters)
	for i, c := range cs {
		go func() {
			call := time.Now()
			l, err := c.Lock(ctx, n, nil)
			got <- res{i, l, call, time.Now(), err}
		}()
	}
	waitQueued(t, ctx, holder, n, waiters)

	lead := leader(t, cli, ms)
	t.Logf("stopping the leader, %s", lead.name)
	lead.stop()
	// Hold on for longer than the session TTL: the hold survives only if
	// keepalives reach the new leader.
	var end time.Time
	select {
	case <-l.Done():
		end = time.Now()
		t.Logf("the hold was reported lost: %v", l.Err())
	case <-time.After(3 * sessionTTL):
		end = time.Now()
		if err := l.Err(); err != nil {
			t.Fatalf("Err = %v without Done", err)
		}
		t.Logf("the hold survived the leader's loss")
		if err := l.ReleaseStrict(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	h.Add(drivertest.Section{Client: -1, Mode: baton.Exclusive, Token: l.Token(), Call: call, Granted: granted, End: end})
	for k := 0; k < waiters; k++ {
		r := <-got
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		if r.when.Before(end) {
			t.Errorf("waiter %d granted at %v, before the holder stopped at %v", r.i, r.when, end)
		}
		if r.l.Token() <= l.Token() {
			t.Errorf("waiter %d token %d not above the first holder's %d", r.i, r.l.Token(), l.Token())
		}
		stop := time.Now()
		h.Add(drivertest.Section{Client: r.i, Mode: baton.Exclusive, Token: r.l.Token(), Call: r.call, Granted: r.when, End: stop})
		if err := r.l.ReleaseStrict(ctx); err != nil {
			t.Errorf("waiter %d: Release: %v", r.i, err)
		}
	}
	for _, err := range h.Check() {
		t.Error(err)
	}
}
