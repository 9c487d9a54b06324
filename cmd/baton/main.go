// Command baton runs commands under distributed locks, and lists, releases
// and purges the locks of a baton store.
//
//	baton run nightly -- ./job.sh
//	baton status
//
// Without --store or BATON_STORE it keeps its locks in an SQLite file in
// the user's state directory, so it works on a fresh machine with no setup
// (for the processes of that machine). Run "baton help" for the rest.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/baton-go/baton"
)

// Exit codes. The run command otherwise exits with its command's code.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotAcquired = 3
	exitLeaseLost   = 4
	exitCannotRun   = 126
	exitNotFound    = 127
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module's build information.
var version = ""

var (
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

type command struct {
	name    string
	summary string
	help    string
	run     func(args []string) int
}

var commands []*command

func init() {
	commands = []*command{
		{name: "run", summary: "run a command while holding a lock", help: runHelp, run: cmdRun},
		{name: "status", summary: "list locks and their holders", help: statusHelp, run: cmdStatus},
		{name: "release", summary: "release a lock held by someone else (administrators)", help: releaseHelp, run: cmdRelease},
		{name: "purge", summary: "delete holds that expired without being released", help: purgeHelp, run: cmdPurge},
		{name: "version", summary: "print baton's version", help: versionHelp, run: cmdVersion},
		{name: "help", summary: "show help for baton or a command", help: helpHelp, run: cmdHelp},
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func main() {
	if isGuard() {
		os.Exit(guardMain())
	}
	os.Exit(runMain(os.Args[1:]))
}

func runMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainHelp())
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainHelp())
		return exitOK
	case "-version", "--version":
		return cmdVersion(nil)
	}
	c := lookup(args[0])
	if c == nil {
		if strings.HasPrefix(args[0], "-") {
			return usageErr("", "flags go after the command, as in: baton run NAME --ttl 30s -- CMD")
		}
		return usageErr("", "unknown command %q", args[0])
	}
	return c.run(args[1:])
}

// fail prints one line, "baton: msg", and returns code.
func fail(code int, format string, args ...any) int {
	fmt.Fprintln(stderr, "baton: "+oneLine(fmt.Sprintf(format, args...)))
	return code
}

// failErr reports err, with exit code 2 for invalid input and 1 otherwise.
func failErr(err error) int {
	code := exitError
	if errors.Is(err, baton.ErrInvalid) {
		code = exitUsage
	}
	return fail(code, "%s", errText(err))
}

// errText is err's message without baton's own "baton: " prefixes.
func errText(err error) string {
	s := strings.ReplaceAll(err.Error(), ": baton: ", ": ")
	return strings.TrimPrefix(s, "baton: ")
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// usageErr reports a command-line mistake and points at the help.
func usageErr(cmd, format string, args ...any) int {
	help := "baton --help"
	if cmd != "" {
		help = "baton " + cmd + " --help"
	}
	fmt.Fprintf(stderr, "baton: %s\nRun '%s' for usage.\n", oneLine(fmt.Sprintf(format, args...)), help)
	return exitUsage
}

// newFlagSet returns a flag set that reports nothing itself.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseArgs parses fs's flags wherever they are among args (the flag
// package alone stops at the first argument that is not a flag), up to a
// "--", after which everything is returned in rest; dash tells whether
// there was a "--". Positional arguments are returned in pos.
func parseArgs(fs *flag.FlagSet, args []string) (pos, rest []string, dash bool, err error) {
	var flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest, dash = args[i+1:], true
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // fs.Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, nil, false, err
	}
	return pos, rest, dash, nil
}

// parseOrHelp parses args for command c; done is set when the caller must
// return code at once (help was asked for, or the flags were wrong).
func parseOrHelp(c string, fs *flag.FlagSet, args []string) (pos, rest []string, dash bool, code int, done bool) {
	pos, rest, dash, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, lookup(c).help)
		return nil, nil, false, exitOK, true
	case err != nil:
		return nil, nil, false, usageErr(c, "%v", flagErr(err)), true
	}
	return pos, rest, dash, 0, false
}

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	m := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}

// storeURL picks the store: the --store flag, else $BATON_STORE, else the
// default SQLite file, whose directory it creates. from says which.
func storeURL(flagValue string) (raw, from string, err error) {
	if flagValue != "" {
		return flagValue, "--store", nil
	}
	if s := os.Getenv("BATON_STORE"); s != "" {
		return s, "BATON_STORE", nil
	}
	p, err := defaultStorePath()
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", "", fmt.Errorf("create the default store's directory: %w (choose a store with --store or BATON_STORE)", err)
	}
	p = filepath.ToSlash(p)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // C:/x on Windows
	}
	return (&url.URL{Scheme: "sqlite", Path: p}).String(), "the default store", nil
}

// defaultStorePath is $XDG_STATE_HOME/baton/baton.db, else
// ~/.local/state/baton/baton.db; on macOS and Windows, where there is no
// state directory, it is in os.UserConfigDir (~/Library/Application
// Support, %AppData%).
func defaultStorePath() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "baton", "baton.db"), nil
	}
	switch runtime.GOOS {
	case "darwin", "ios", "windows", "plan9":
		d, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("no place for the default store: %w (choose one with --store or BATON_STORE)", err)
		}
		return filepath.Join(d, "baton", "baton.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("no place for the default store: neither $XDG_STATE_HOME nor $HOME is set (choose one with --store or BATON_STORE)")
	}
	return filepath.Join(home, ".local", "state", "baton", "baton.db"), nil
}

// redact removes passwords from a store URL: from its user information and
// from query parameters that commonly carry secrets.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.User(u.User.Username())
			changed = true
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			switch strings.ToLower(k) {
			case "password", "passwd", "pass", "pwd", "secret", "token", "auth", "access_key", "secret_key", "sslpassword":
				q.Del(k)
				changed = true
			}
		}
		u.RawQuery = q.Encode()
	}
	if !changed {
		return raw // as the user wrote it: u.String() turns mem:// into mem:
	}
	return u.String()
}

// openFailed reports a failure to open the store named by raw.
func openFailed(err error, raw, from string) int {
	if errors.Is(err, baton.ErrUnknownStore) {
		scheme := raw
		if u, perr := url.Parse(raw); perr == nil {
			scheme = u.Scheme
		}
		return usageErr("", "unknown store %q in %s %q: this baton knows %s (mem:// is private to one process)%s", scheme, from, redact(raw), strings.Join(baton.Schemes(), ", "), buildHint(scheme))
	}
	if errors.Is(err, baton.ErrInvalid) {
		return usageErr("", "%s (from %s)", errText(err), from)
	}
	return failErr(err)
}

func versionString() string {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("baton %s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cmdVersion(args []string) int {
	fs := newFlagSet("version")
	pos, _, _, code, done := parseOrHelp("version", fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageErr("version", "unexpected argument %q", pos[0])
	}
	fmt.Fprintln(stdout, versionString())
	return exitOK
}

func cmdHelp(args []string) int {
	fs := newFlagSet("help")
	pos, _, _, code, done := parseOrHelp("help", fs, args)
	if done {
		return code
	}
	switch len(pos) {
	case 0:
		fmt.Fprint(stdout, mainHelp())
		return exitOK
	case 1:
		c := lookup(pos[0])
		if c == nil {
			return usageErr("help", "unknown command %q", pos[0])
		}
		fmt.Fprint(stdout, c.help)
		return exitOK
	}
	return usageErr("help", "too many arguments")
}

// verbose is set by run --verbose: baton then says what it waits for and
// what happens to the lease, and passes on its drivers' log lines.
var verbose bool

// driverLog passes a log line of a store's driver on to stderr with
// --verbose, and drops it otherwise.
func driverLog(store, line string) {
	if verbose {
		fmt.Fprintf(stderr, "baton: %s driver: %s\n", store, oneLine(line))
	}
}
