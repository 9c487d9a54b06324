package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/baton-go/baton"
)

// leaseEvents prints the lease's events with --verbose.
func leaseEvents(name string) func(baton.Event) {
	if !verbose {
		return nil
	}
	return func(e baton.Event) {
		if e.Name != name {
			return
		}
		switch e.Kind {
		case baton.EventAcquired:
			fmt.Fprintf(stderr, "baton: acquired lock %q, token %d\n", name, e.Token)
		case baton.EventRenewed:
			fmt.Fprintf(stderr, "baton: renewed the lease of %q (it had %s left)\n", name, fmtDuration(e.Left))
		case baton.EventRenewFailed:
			fmt.Fprintf(stderr, "baton: renewing the lease of %q failed, retrying until its deadline: %s\n", name, oneLine(errText(e.Err)))
		case baton.EventLost, baton.EventExpired:
			fmt.Fprintf(stderr, "baton: the lease of %q ended after %s: %s\n", name, fmtDuration(e.Held), oneLine(errText(e.Err)))
		case baton.EventReleased:
			fmt.Fprintf(stderr, "baton: released lock %q after %s\n", name, fmtDuration(e.Held))
		}
	}
}

// noticeAfter is how long a wait goes before baton says what it waits
// for on a terminal, without --verbose.
const noticeAfter = time.Second

// sayWaiting tells, while a Lock of name waits, what it waits for: with
// --verbose, who holds the lock, since when, with which token and how
// much time left, and again whenever that changes; otherwise, on a
// terminal, once after a second. It returns when ctx ends.
func sayWaiting(ctx context.Context, client *baton.Client, name string) {
	if !verbose && !term.IsTerminal(int(os.Stderr.Fd())) {
		return
	}
	t := time.NewTimer(noticeAfter)
	if verbose {
		t.Reset(200 * time.Millisecond) // a Lock granted at once says nothing
	}
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, who := holders(ctx, client, name)
		if ctx.Err() != nil {
			return
		}
		if !verbose {
			fmt.Fprintf(stderr, "baton: waiting for lock %q, %s (--verbose says more)\n", name, s)
			return
		}
		if who != last {
			fmt.Fprintf(stderr, "baton: waiting for lock %q, %s\n", name, s)
			last = who
		}
		t.Reset(time.Second)
	}
}

// holders describes who holds name and who else waits for it (the caller
// waits too: its queue entry is not counted); who changes only when the
// holders or the number of waiters do.
func holders(ctx context.Context, client *baton.Client, name string) (text, who string) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hs, err := client.Status(sctx, &baton.Filter{Name: name, Queued: true})
	if err != nil {
		return "held (status unavailable: " + oneLine(errText(err)) + ")", "?"
	}
	var held []string
	waiting := 0
	for _, h := range hs {
		if h.Queued {
			waiting++
			continue
		}
		who += fmt.Sprintf("%s/%d ", h.Owner, h.Token)
		s := "held by " + h.Owner
		if h.Host != "" {
			s += " on " + h.Host
		}
		s += fmt.Sprintf(" since %s (token %d", h.Created.Local().Format("15:04:05"), h.Token)
		if !h.Expires.IsZero() && verbose {
			s += ", " + fmtDuration(h.Left) + " left"
		}
		held = append(held, s+")")
	}
	out := "free"
	if len(held) > 0 {
		out = strings.Join(held, ", ")
	}
	if waiting--; waiting > 0 {
		out += fmt.Sprintf("; %d more waiting", waiting)
	}
	return out, fmt.Sprint(who, waiting)
}
