package main

import (
	"os"
	"slices"
	"strings"
)

// askSignal is the signal that --on-ask names (TERM, SIGTERM, term…); nil
// for "none". ok is false for a name baton does not forward.
func askSignal(name string) (s os.Signal, ok bool) {
	n := sigName(name)
	if n == "NONE" {
		return nil, true
	}
	s, ok = askSignals[n]
	return s, ok
}

func sigName(name string) string { return strings.TrimPrefix(strings.ToUpper(name), "SIG") }

// askSignalNames lists the names --on-ask takes.
func askSignalNames() []string {
	names := make([]string, 0, len(askSignals))
	for n := range askSignals {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// stopsCommand reports whether s asks the command to end, so that it gets
// --grace before SIGKILL.
func stopsCommand(s os.Signal) bool { return slices.Contains(stopSignals, s) }
