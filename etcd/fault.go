package etcd

import (
	"context"
	"net"
	"sync"
)

// crash drops the store's session as a killed process would, for tests
// (drivertest.Crasher, through export_test.go): keepalives stop and the connection closes, but the
// lease is not revoked, so the server ends it after SessionTTL. The store
// is unusable afterwards; Close only frees what is left. A store made by
// New only stops its keepalives: the caller's client stays open.
func (s *Store) crash() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed, s.crashed = true, true
	ss := s.sess
	s.sess = nil
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	if ss != nil {
		ss.mu.Lock()
		ss.timer.Stop()
		ss.mu.Unlock()
	}
	if s.owned {
		s.cli.Close()
	}
}

// setPartitioned cuts the store off from the cluster (true), as a network
// partition would, or reconnects it (false), for tests
// (drivertest.Partitioner, through export_test.go). While cut off, nothing the client sends
// reaches the servers (keepalives included) and nothing they send is
// read; new connections wait. Reconnecting closes the connections that
// were cut, and the client dials anew. Only stores made by Open can be
// cut off; for others it does nothing.
func (s *Store) setPartitioned(down bool) {
	if s.gate != nil {
		s.gate.set(down)
	}
}

// netGate dials the client's connections and can black-hole them.
type netGate struct {
	mu    sync.Mutex
	down  bool
	up    chan struct{} // closed while not down
	conns map[*gateConn]struct{}
}

func newNetGate() *netGate {
	up := make(chan struct{})
	close(up)
	return &netGate{up: up, conns: make(map[*gateConn]struct{})}
}

func (g *netGate) set(down bool) {
	g.mu.Lock()
	if down == g.down {
		g.mu.Unlock()
		return
	}
	g.down = down
	var cut []*gateConn
	if down {
		g.up = make(chan struct{})
	} else {
		close(g.up)
		for c := range g.conns {
			cut = append(cut, c)
			delete(g.conns, c)
		}
	}
	g.mu.Unlock()
	for _, c := range cut {
		c.Conn.Close()
	}
}

func (g *netGate) isDown() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

func (g *netGate) dial(ctx context.Context, addr string) (net.Conn, error) {
	for {
		g.mu.Lock()
		down, up := g.down, g.up
		g.mu.Unlock()
		if !down {
			break
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	gc := &gateConn{Conn: c, g: g}
	g.mu.Lock()
	g.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

// gateConn drops what is written and read while its gate is down.
type gateConn struct {
	net.Conn
	g *netGate
}

func (c *gateConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.g.isDown() {
			return n, err
		}
	}
}

func (c *gateConn) Write(p []byte) (int, error) {
	if c.g.isDown() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *gateConn) Close() error {
	c.g.mu.Lock()
	delete(c.g.conns, c)
	c.g.mu.Unlock()
	return c.Conn.Close()
}
