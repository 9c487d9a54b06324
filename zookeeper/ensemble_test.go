package zookeeper_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/zookeeper"
)

// ensemble is three ZooKeeper servers on 127.0.0.1, started by the test
// with the same java command line as scripts/servers.
type ensemble struct {
	clientPorts []int
	procs       []*exec.Cmd
}

const zkClasspath = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"

func startEnsemble(t *testing.T) *ensemble {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatal("java not found: run `scripts/servers up zookeeper`, which installs ZooKeeper and its JRE")
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		t.Fatal("/usr/share/java/zookeeper.jar not found: run `scripts/servers up zookeeper`")
	}
	dir := t.TempDir()
	e := &ensemble{clientPorts: []int{21810, 21811, 21812}}
	var members strings.Builder
	for i := range 3 {
		fmt.Fprintf(&members, "server.%d=127.0.0.1:%d:%d\n", i+1, 21820+i, 21830+i)
	}
	for i, port := range e.clientPorts {
		data := filepath.Join(dir, fmt.Sprint("zk", i+1))
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprint(i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, fmt.Sprintf("zoo%d.cfg", i+1))
		err := os.WriteFile(cfg, []byte(fmt.Sprintf(`tickTime=200
initLimit=20
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr,stat
minSessionTimeout=1000
maxSessionTimeout=60000
%s`, data, port, members.String())), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("zk%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(java, "-Xmx256m", "-Dzookeeper.log.dir="+dir, "-cp", zkClasspath,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		e.procs = append(e.procs, cmd)
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			logf.Close()
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders, followers := 0, 0
		for _, p := range e.clientPorts {
			switch mode(p) {
			case "leader":
				leaders++
			case "follower":
				followers++
			}
		}
		if leaders == 1 && followers == 2 {
			return e
		}
		if time.Now().After(deadline) {
			for i := range 3 {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("zk%d.log", i+1)))
				t.Logf("server %d log tail:\n%s", i+1, tail(string(b), 2000))
			}
			t.Fatal("the ensemble did not elect a leader within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// mode asks a server for its mode with the srvr command.
func mode(port int) string {
	c, err := net.DialTimeout("tcp", fmt.Sprint("127.0.0.1:", port), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return ""
	}
	b, _ := io.ReadAll(c)
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

func (e *ensemble) servers() []string {
	var s []string
	for _, p := range e.clientPorts {
		s = append(s, fmt.Sprint("127.0.0.1:", p))
	}
	return s
}

// killLeader kills the leader (SIGKILL) and returns its index.
func (e *ensemble) killLeader(t *testing.T) int {
	t.Helper()
	for i, p := range e.clientPorts {
		if mode(p) == "leader" {
			e.procs[i].Process.Kill()
			e.procs[i].Wait()
			return i
		}
	}
	t.Fatal("no leader found")
	return -1
}

// TestEnsembleLeaderKilled kills the ensemble's leader while a lock is
// held and another client waits for it: the holder is told its session
// is at risk (disconnected), and either keeps its lease (it reconnects to
// another server within the session timeout) or loses it before the
// waiter is granted; never two holders at once.
func TestEnsembleLeaderKilled(t *testing.T) {
	e := startEnsemble(t)
	ctx := ctxFor(t, 60*time.Second)
	const timeout = 4 * time.Second
	holderLog := &eventLog{}
	open := func(log *eventLog) *zookeeper.Store {
		o := &zookeeper.Options{Root: "/ensemble", SessionTimeout: timeout}
		if log != nil {
			o.OnEvent = log.add
		}
		st, err := zookeeper.Open(ctx, zkURL(e.servers()), o)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, b := client(t, open(holderLog), nil), client(t, open(nil), nil)
	h := &drivertest.History{}
	name := "ensemble-lock"

	callA := time.Now()
	la, err := a.Lock(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	grantedA := time.Now()
	type result struct {
		l       *baton.Lease
		call    time.Time
		granted time.Time
		err     error
	}
	waiter := make(chan result, 1)
	go func() {
		call := time.Now()
		l, err := b.Lock(ctx, name, nil)
		waiter <- result{l, call, time.Now(), err}
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter queue

	killed := e.killLeader(t)
	t.Logf("killed the leader, server %d", killed+1)
	holderLog.wait(t, zookeeper.EventDisconnected, 1)

	// The holder works on for twice the session timeout, unless its lease
	// ends first.
	var endA time.Time
	lost := false
	select {
	case <-la.Done():
		endA, lost = time.Now(), true
	case <-time.After(2 * timeout):
		endA = time.Now()
	}
	if !lost {
		if err := la.Err(); err != nil {
			t.Fatalf("lease ended without Done: %v", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Logf("release after the failover: %v", err)
		}
	}
	h.Add(drivertest.Section{Client: 0, Mode: baton.Exclusive, Token: la.Token(), Call: callA, Granted: grantedA, End: endA})

	r := <-waiter
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	h.Add(drivertest.Section{Client: 1, Mode: baton.Exclusive, Token: r.l.Token(), Call: r.call, Granted: r.granted, End: drivertest.End(r.l)})
	r.l.Release(ctx)
	for _, err := range h.Check() {
		t.Error(err)
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("waiter's token %d not above the holder's %d", r.l.Token(), la.Token())
	}
	kinds := holderLog.kinds()
	t.Logf("holder's events: %v; lease lost: %v", kinds, lost)
	if lost {
		if !strings.Contains(fmt.Sprint(kinds), string(zookeeper.EventSessionExpired)) {
			t.Errorf("lease lost without a session-expired event: %v", kinds)
		}
	} else if !strings.Contains(fmt.Sprint(kinds), string(zookeeper.EventReconnected)) {
		t.Errorf("lease kept without a reconnected event: %v", kinds)
	}
}
