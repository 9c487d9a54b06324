package faultcheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// OK reports whether the run found no violation and the harness no error.
func (r *Result) OK() bool { return len(r.Violations) == 0 && len(r.Errors) == 0 }

// FaultCount is the number of faults injected, of every kind.
func (r *Result) FaultCount() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

func (r *Result) faultList() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	return strings.Join(parts, ", ")
}

// Table formats results as the table the short run prints at its end.
func Table(results []*Result) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tduration\tops\tgrants\tlost\twrites ok\tstale refused\tfaults\tkilled holders\tviolations\tworst re-grant\tbound\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Store, r.Duration.Round(time.Second),
			r.Ops, r.Grants, r.Lost, r.Writes["accepted"], r.Writes["rejected"], r.FaultCount(), r.Deaths,
			len(r.Violations), r.WorstRegrant.Round(time.Millisecond), r.Bound)
	}
	tw.Flush()
	for _, r := range results {
		fmt.Fprintf(&b, "%s faults: %s\n", r.Store, r.faultList())
		for _, f := range r.topFailures(3) {
			fmt.Fprintf(&b, "%s failed Lock: %s\n", r.Store, f)
		}
	}
	return b.String()
}

// Markdown is the soak report of a run, with the command that ran it.
func (r *Result) Markdown(command string) string {
	var b strings.Builder
	status := "PASS"
	if !r.OK() {
		status = "FAIL"
	}
	fmt.Fprintf(&b, "# faultcheck soak: %s — %s\n\n", r.Store, status)
	fmt.Fprintf(&b, "Command: `%s` (seed %d), run %s.\n\n", command, r.Seed, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("duration", r.Duration.Round(time.Second))
	row("worker processes started", r.Processes)
	row("Lock calls", r.Ops)
	row("grants", r.Grants)
	row("Lock calls that failed (timeouts under faults)", r.Failed)
	for _, f := range r.topFailures(5) {
		row("&nbsp;&nbsp;failed Lock", f)
	}
	row("leases lost while held", r.Lost)
	row("fenced writes accepted", r.Writes["accepted"])
	row("stale fenced writes refused", r.Writes["rejected"])
	row("fenced writes that failed", r.Writes["error"])
	row("faults injected", fmt.Sprintf("%d (%s)", r.FaultCount(), r.faultList()))
	row("exclusive holders killed while holding", r.Deaths)
	row("re-grants measured after a holder's death", r.Regrants)
	if r.WorstWhat != "" {
		row("worst time to re-grant", fmt.Sprintf("%v (%s)", r.WorstRegrant.Round(time.Millisecond), r.WorstWhat))
	} else {
		row("worst time to re-grant", r.WorstRegrant.Round(time.Millisecond))
	}
	row("re-grant, median and 90th percentile", fmt.Sprintf("%v, %v", r.RegrantP50.Round(time.Millisecond), r.RegrantP90.Round(time.Millisecond)))
	row("bound (2×TTL + 10×MaxPoll + 3s; + downtime + TTL across a restart)", r.Bound)
	if r.KnownRaces > 0 {
		row("workers whose race detector found only a known race inside the driver", r.KnownRaces)
	}
	row("violations", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n- violation: %s", v)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "\n- harness error: %v", e)
	}
	b.WriteString("\n")
	return b.String()
}

// topFailures lists the n most frequent Lock errors.
func (r *Result) topFailures(n int) []string {
	msgs := slices.SortedFunc(maps.Keys(r.FailedBy), func(a, b string) int { return r.FailedBy[b] - r.FailedBy[a] })
	var out []string
	for i, m := range msgs {
		if i == n {
			break
		}
		out = append(out, fmt.Sprintf("%d× %s", r.FailedBy[m], m))
	}
	return out
}
