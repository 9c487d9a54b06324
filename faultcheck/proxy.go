package faultcheck

import (
	"net"
	"sync"
	"time"
)

// ProxyMode is what a Proxy does to the traffic of its one client.
type ProxyMode int

const (
	// Pass forwards everything.
	Pass ProxyMode = iota
	// Blackhole forwards nothing, in either direction, and accepts new
	// connections without ever answering on them: packets silently lost,
	// as with a dead route. The client sees only timeouts.
	Blackhole
	// Partition refuses the client: existing connections are reset, new
	// ones are reset as soon as they are accepted.
	Partition
)

// Proxy is a TCP proxy in front of the store for one client process, so
// that faults hit that client alone. It adds latency, resets connections,
// blackholes or partitions on demand.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    ProxyMode
	latency time.Duration
	changed chan struct{} // closed and replaced whenever mode changes
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type proxyConn struct{ client, server net.Conn }

// NewProxy listens on 127.0.0.1 (a free port) and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the store's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk forwarded, in both directions, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetMode switches between Pass, Blackhole and Partition. Entering
// Partition resets every open connection.
func (p *Proxy) SetMode(m ProxyMode) {
	p.mu.Lock()
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if m == Partition {
		p.Reset()
	}
}

// Reset closes every open connection with a TCP RST on the client's side.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

func (c *proxyConn) reset() {
	if tc, ok := c.client.(*net.TCPConn); ok {
		tc.SetLinger(0) // close sends RST
	}
	c.client.Close()
	c.server.Close()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	close(p.changed) // wakes pipes held by a blackhole
	p.changed = make(chan struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) state() (ProxyMode, time.Duration, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		mode, _, _ := p.state()
		if mode == Partition {
			(&proxyConn{client: client, server: nopConn{}}).reset()
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			(&proxyConn{client: client, server: nopConn{}}).reset()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.reset()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, client, server)
		go p.pipe(c, server, client)
	}
}

// pipe copies from src to dst, holding data while the proxy blackholes
// and delaying it by the latency. A blackholed chunk is held, not dropped
// (TCP would retransmit it): it is delivered if the blackhole ends before
// the client gives up on the connection.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		c.client.Close()
		c.server.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for {
				mode, latency, changed := p.state()
				if mode == Partition || p.isClosed() {
					return
				}
				if mode == Blackhole {
					<-changed
					continue
				}
				if latency > 0 {
					time.Sleep(latency)
				}
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or error: the store protocols here never half-close
		}
	}
}

// nopConn stands in for a server connection never dialled.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
