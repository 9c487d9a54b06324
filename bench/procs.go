package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// A target "procs:KIND=URL" runs each client of KIND in a child process of
// its own (this binary, started with -child), driven over its stdin and
// stdout: the parent writes "lock NAME" or "unlock", the child answers "ok"
// or "err MESSAGE". It measures what crosses processes (SQLite's file
// notifications, say); the pipe adds a few tens of µs to each figure.

func procsTarget(kind, url string) (Target, bool) {
	mk := kinds[kind]
	if mk == nil {
		return Target{}, false
	}
	inner := mk(url)
	return Target{Name: inner.Name + " (processes)", Remote: true, New: func(ctx context.Context) (Locker, error) {
		cmd := exec.CommandContext(ctx, os.Args[0], "-child", kind+"="+url)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &procLocker{cmd: cmd, in: in, out: bufio.NewReader(out)}
		if err := p.call("ping"); err != nil {
			p.Close()
			return nil, err
		}
		return p, nil
	}}, true
}

type procLocker struct {
	mu  sync.Mutex // one request at a time on the pipe
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (p *procLocker) call(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		return err
	}
	reply, err := p.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("child: %w", err)
	}
	if reply = strings.TrimSpace(reply); reply != "ok" {
		return fmt.Errorf("child: %s", reply)
	}
	return nil
}

func (p *procLocker) Lock(_ context.Context, name string) (func() error, error) {
	if err := p.call("lock " + name); err != nil {
		return nil, err
	}
	return func() error { return p.call("unlock") }, nil
}

func (p *procLocker) Close() error {
	p.in.Close()
	return p.cmd.Wait()
}

// child serves one client of KIND=URL over stdin and stdout.
func child(spec string) error {
	kind, url, _ := strings.Cut(spec, "=")
	mk := kinds[kind]
	if mk == nil {
		return fmt.Errorf("unknown kind %q", kind)
	}
	ctx := context.Background()
	l, err := mk(url).New(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	var release func() error
	sc := bufio.NewScanner(os.Stdin)
	w := bufio.NewWriter(os.Stdout)
	reply := func(err error) {
		if err != nil {
			fmt.Fprintf(w, "err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintln(w, "ok")
		}
		w.Flush()
	}
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch {
		case cmd == "ping":
			reply(nil)
		case cmd == "lock" && release == nil:
			release, err = l.Lock(ctx, arg)
			reply(err)
		case cmd == "unlock" && release != nil:
			err := release()
			release = nil
			reply(err)
		default:
			reply(fmt.Errorf("unexpected %q", sc.Text()))
		}
	}
	return sc.Err()
}
