package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-go/baton"
)

// openStore opens the store chosen by --store, $BATON_STORE or the default,
// giving up after bound. Without a client, it has reported why and returns
// the exit code.
func openStore(ctx context.Context, flagValue string, bound time.Duration, opts *baton.Options) (*baton.Client, int) {
	raw, from, err := storeURL(flagValue)
	if err != nil {
		return nil, fail(exitError, "%v", err)
	}
	return connect(ctx, raw, from, bound, opts)
}

// connectTimeout bounds connecting to the store when no --timeout says
// otherwise.
const connectTimeout = 10 * time.Second

// connect opens the store raw (named by from), giving up after bound.
func connect(ctx context.Context, raw, from string, bound time.Duration, opts *baton.Options) (*baton.Client, int) {
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	c, err := baton.Open(cctx, raw, opts)
	if err != nil {
		if context.Cause(ctx) == errInterrupted {
			return nil, exitError // the caller says so
		}
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return nil, fail(exitError, "cannot reach the store %s (from %s) within %v: %s", redact(raw), from, bound, errText(err))
		}
		return nil, openFailed(err, raw, from)
	}
	return c, 0
}

func cmdStatus(args []string) int {
	fs := newFlagSet("status")
	asJSON := fs.Bool("json", false, "JSON output")
	all := fs.Bool("all", false, "include waiters and expired holds")
	store := fs.String("store", "", "store URL")
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", connectTimeout, "give up after this long")
	pos, rest, _, code, done := parseOrHelp("status", fs, args)
	if done {
		return code
	}
	pos = append(pos, rest...)
	if len(pos) > 1 {
		return usageErr("status", "unexpected argument %q (status takes one PREFIX)", pos[1])
	}
	f := &baton.Filter{Queued: *all, Expired: *all}
	if len(pos) == 1 {
		f.Prefix = pos[0]
	}
	if timeout <= 0 {
		return usageErr("status", "--timeout must be positive (got %v)", timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client, code := openStore(ctx, *store, timeout, nil)
	if client == nil {
		return code
	}
	defer client.Close()
	hs, err := client.Status(ctx, f)
	if err != nil {
		return failErr(err)
	}
	now := time.Now()
	if *asJSON {
		out := make([]jsonHold, len(hs))
		for i := range hs {
			out[i] = toJSON(&hs[i])
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return failErr(err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	if len(hs) == 0 {
		if f.Prefix != "" {
			fmt.Fprintf(stderr, "no locks held matching %q\n", f.Prefix)
		} else {
			fmt.Fprintln(stderr, "no locks held")
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tOWNER\tTOKEN\tHOST\tLEFT\tAGE")
	for i := range hs {
		h := &hs[i]
		token, left, age := strconv.FormatUint(h.Token, 10), "", "-"
		switch {
		case h.Expires.IsZero():
			left = "session"
		case h.Left <= 0:
			left = "expired"
		default:
			left = fmtDuration(h.Left)
		}
		if h.Queued {
			token, left = "(queued)", "-"
		}
		if !h.Created.IsZero() {
			age = fmtDuration(now.Sub(h.Created))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			field(h.Name), modeString(h), field(h.Owner), token, field(h.Host), left, age)
	}
	if err := tw.Flush(); err != nil {
		return failErr(err)
	}
	return exitOK
}

// field makes a value safe for one table cell.
func field(s string) string {
	if s == "" {
		return "-"
	}
	if strings.ContainsAny(s, "\t\n\r") {
		s = strconv.Quote(s)
	}
	return s
}

func modeString(h *baton.LockInfo) string {
	m := h.Mode.String()
	if h.Limit > 0 {
		m += "/" + strconv.Itoa(h.Limit)
	}
	return m
}

// jsonHold is the JSON form of a hold, with stable lower-case keys. Times
// are RFC 3339 in UTC, null when unknown; expires and left_ms are null for
// holds that live as long as a store session.
type jsonHold struct {
	Name    string            `json:"name"`
	Owner   string            `json:"owner"`
	Mode    string            `json:"mode"`
	Limit   int               `json:"limit"`
	Token   uint64            `json:"token"`
	Host    string            `json:"host"`
	Meta    map[string]string `json:"meta"`
	TTLMs   int64             `json:"ttl_ms"`
	Created *time.Time        `json:"created"`
	Renewed *time.Time        `json:"renewed"`
	Expires *time.Time        `json:"expires"`
	LeftMs  *int64            `json:"left_ms"`
	Queued  bool              `json:"queued"`
}

func toJSON(h *baton.LockInfo) jsonHold {
	j := jsonHold{
		Name: h.Name, Owner: h.Owner, Mode: h.Mode.String(), Limit: h.Limit,
		Token: h.Token, Host: h.Host, Meta: h.Meta, TTLMs: h.TTL.Milliseconds(),
		Created: jsonTime(h.Created), Renewed: jsonTime(h.Renewed), Expires: jsonTime(h.Expires),
		Queued: h.Queued,
	}
	if j.Meta == nil {
		j.Meta = map[string]string{}
	}
	if !h.Expires.IsZero() {
		ms := h.Left.Milliseconds()
		j.LeftMs = &ms
	}
	return j
}

func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// fmtDuration rounds d for people: 400ms, 3.2s, 42s, 3m20s, 2h5m, 3d4h.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	switch {
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 24*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}

func cmdRelease(args []string) int {
	fs := newFlagSet("release")
	owner := fs.String("owner", "", "owner id")
	ask := fs.Bool("ask", false, "ask the holders to release the lock instead")
	reason := fs.String("reason", "", "with --ask: the reason the holders are told")
	store := fs.String("store", "", "store URL")
	var timeout, wait time.Duration
	durationVar(fs, &timeout, "timeout", connectTimeout, "give up after this long")
	durationVar(fs, &wait, "wait", time.Minute, "with --ask: how long to wait for the holders to let go")
	pos, rest, _, code, done := parseOrHelp("release", fs, args)
	if done {
		return code
	}
	pos = append(pos, rest...)
	set := flagsSet(fs)
	switch {
	case len(pos) == 0 && *ask:
		return usageErr("release", "missing lock NAME: baton release NAME --ask")
	case len(pos) == 0:
		return usageErr("release", "missing lock NAME: baton release NAME --owner ID")
	case len(pos) > 1:
		return usageErr("release", "unexpected argument %q (release takes one NAME)", pos[1])
	case pos[0] == "":
		return usageErr("release", "the lock NAME is empty")
	case *ask && *owner != "":
		return usageErr("release", "--ask asks every holder: it takes no --owner")
	case !*ask && (set["reason"] || set["wait"]):
		return usageErr("release", "--reason and --wait go with --ask")
	case !*ask && *owner == "":
		return usageErr("release", "missing --owner ID (see the OWNER column of baton status), or --ask to ask the holders")
	case *ask && wait < baton.MinTTL:
		return usageErr("release", "--wait must be at least %v (got %v)", baton.MinTTL, wait)
	}
	name := pos[0]
	if timeout <= 0 {
		return usageErr("release", "--timeout must be positive (got %v)", timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client, code := openStore(ctx, *store, timeout, nil)
	if client == nil {
		return code
	}
	defer client.Close()
	if *ask {
		return askRelease(ctx, client, name, *reason, wait)
	}
	if err := client.ForceRelease(ctx, name, *owner); err != nil {
		if errors.Is(err, baton.ErrNotHeld) {
			return fail(exitError, "owner %q does not hold lock %q: nothing released", *owner, name)
		}
		return failErr(err)
	}
	fmt.Fprintf(stdout, "released lock %q held by %s\n", name, *owner)
	fmt.Fprintf(stderr, "baton: warning: the holder is not told until its next renewal (within a third of its TTL) and may act as the holder until then\n")
	return exitOK
}

func cmdPurge(args []string) int {
	fs := newFlagSet("purge")
	store := fs.String("store", "", "store URL")
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", connectTimeout, "give up after this long")
	pos, rest, _, code, done := parseOrHelp("purge", fs, args)
	if done {
		return code
	}
	if pos = append(pos, rest...); len(pos) > 0 {
		return usageErr("purge", "unexpected argument %q", pos[0])
	}
	if timeout <= 0 {
		return usageErr("purge", "--timeout must be positive (got %v)", timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client, code := openStore(ctx, *store, timeout, nil)
	if client == nil {
		return code
	}
	defer client.Close()
	hs, err := client.Purge(ctx)
	if err != nil {
		return failErr(err)
	}
	for i := range hs {
		h := &hs[i]
		kind, details := "hold", []string{}
		if h.Queued {
			kind = "queue entry"
		} else {
			details = append(details, fmt.Sprintf("token %d", h.Token))
		}
		if h.Host != "" {
			details = append(details, "host "+h.Host)
		}
		if h.Left < 0 {
			details = append(details, "expired "+fmtDuration(-h.Left)+" ago")
		}
		line := fmt.Sprintf("purged %s of %q by %s", kind, h.Name, h.Owner)
		if len(details) > 0 {
			line += " (" + strings.Join(details, ", ") + ")"
		}
		fmt.Fprintln(stdout, line)
	}
	switch len(hs) {
	case 0:
		fmt.Fprintln(stdout, "nothing to purge")
	case 1:
		fmt.Fprintln(stdout, "purged 1 expired entry")
	default:
		fmt.Fprintf(stdout, "purged %d expired entries\n", len(hs))
	}
	return exitOK
}

// askRelease asks the holders of name to release it and waits until they
// did, or wait passed (the ask stands that long, and ends when baton exits).
func askRelease(ctx context.Context, client *baton.Client, name, reason string, wait time.Duration) int {
	hs, err := client.Status(ctx, &baton.Filter{Name: name})
	if err != nil {
		return failErr(err)
	}
	n, err := client.Ask(ctx, name, &baton.AskOptions{Reason: reason, TTL: wait})
	switch {
	case err != nil:
		return failErr(err)
	case n == 0:
		fmt.Fprintf(stdout, "lock %q is not held: nobody to ask\n", name)
		return exitOK
	}
	asked := map[uint64]bool{}
	for _, h := range hs {
		asked[h.Token] = true
	}
	fmt.Fprintf(stderr, "baton: asked %d holder(s) of lock %q to release it; waiting up to %v\n", n, name, wait)
	wctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	watch, err := client.WatchHolders(wctx, name, 0)
	if err != nil {
		return failErr(err)
	}
	var left []baton.LockInfo
	for held := range watch {
		left = left[:0]
		for _, h := range held {
			if asked[h.Token] {
				left = append(left, h)
			}
		}
		if len(left) == 0 {
			fmt.Fprintf(stdout, "lock %q was released by the holder(s) asked\n", name)
			return exitOK
		}
	}
	if len(left) == 0 {
		return fail(exitError, "could not follow lock %q's holders for %v", name, wait)
	}
	return fail(exitError, "lock %q is still held by %s (token %d) after %v: the holder does not follow asks, or is still letting go (release --owner forces it)", name, left[0].Owner, left[0].Token, wait)
}
