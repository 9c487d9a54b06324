//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// Where there are no process groups (Windows), the command is a plain
// child of baton: if baton is killed, the command goes on running.

type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startChild(argv, env []string) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) signal(s os.Signal) { _ = c.cmd.Process.Signal(s) }
func (c *child) kill()              { _ = c.cmd.Process.Kill() }
func (c *child) done()              {}

func isGuard() bool  { return false }
func guardMain() int { return exitError }
