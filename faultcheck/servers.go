package faultcheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// DefaultDir is where the harness's own server instances keep their data
// and logs: apart from the shared servers (/tmp/baton-servers) that the
// store modules' tests use, which the harness never touches.
const DefaultDir = "/tmp/baton-faults"

// Servers runs scripts/servers (at script) with args for store s, on the
// harness's own instance: its data in dir, its port s.Port.
func Servers(ctx context.Context, script, dir string, s Store, args ...string) error {
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Env = append(os.Environ(), "BATON_SERVERS_DIR="+dir, PortVar(s.Server)+"="+strconv.Itoa(s.Port))
	cmd.Env = append(cmd.Env, s.ServerEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %v\n%s", script, args, err, out)
	}
	return nil
}

// PortVar is the variable scripts/servers reads server's port from.
func PortVar(server string) string {
	return "BATON_PORT_" + strings.ToUpper(strings.ReplaceAll(server, "-", "_"))
}
