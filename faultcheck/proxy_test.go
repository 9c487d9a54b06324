package faultcheck

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves an echo server on 127.0.0.1 until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err
}

func TestProxyFaults(t *testing.T) {
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatal("pass:", err)
	}

	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(c, 5*time.Second); err != nil || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("latency: %v after %v, want ≥ 200ms (two chunks)", err, time.Since(start))
	}
	p.SetLatency(0)

	p.SetMode(Blackhole)
	if err := roundTrip(c, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole: %v, want a timeout", err)
	}
	p.SetMode(Pass) // the held ping is delivered now
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatal("after blackhole:", err)
	}

	p.SetMode(Partition)
	if err := roundTrip(c, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("partition, open connection: %v, want a reset", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		err = roundTrip(c2, 5*time.Second)
		c2.Close()
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("partition, new connection: %v, want a reset", err)
	}
	p.SetMode(Pass)

	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3, 5*time.Second); err != nil {
		t.Fatal("pass again:", err)
	}
	p.Reset()
	if err := roundTrip(c3, 5*time.Second); err == nil {
		t.Fatal("reset: the connection still works")
	}
}
