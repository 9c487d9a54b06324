package drivertest

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// The checker must catch what it is there to catch.
func TestHistoryCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sec := func(client int, mode baton.Mode, limit int, token uint64, call, granted, end int) Section {
		return Section{Client: client, Mode: mode, Limit: limit, Token: token, Call: at(call), Granted: at(granted), End: at(end)}
	}
	for _, tc := range []struct {
		name string
		ops  []Section
		want string // "" = no violation
	}{
		{"sequential", []Section{sec(1, baton.Exclusive, 0, 1, 0, 1, 5), sec(2, baton.Exclusive, 0, 2, 0, 6, 9)}, ""},
		{"exclusive overlap", []Section{sec(1, baton.Exclusive, 0, 1, 0, 1, 5), sec(2, baton.Exclusive, 0, 2, 0, 4, 9)}, "overlap"},
		{"shared with exclusive", []Section{sec(1, baton.Shared, 0, 1, 0, 1, 5), sec(2, baton.Exclusive, 0, 2, 0, 4, 9)}, "overlap"},
		{"shared together", []Section{sec(1, baton.Shared, 0, 1, 0, 1, 5), sec(2, baton.Shared, 0, 2, 0, 2, 9)}, ""},
		{"semaphore full", []Section{sec(1, baton.Shared, 2, 1, 0, 1, 9), sec(2, baton.Shared, 2, 2, 0, 2, 9), sec(3, baton.Shared, 2, 3, 0, 3, 9)}, "semaphore of 2 had 3"},
		{"semaphore ok", []Section{sec(1, baton.Shared, 2, 1, 0, 1, 9), sec(2, baton.Shared, 2, 2, 0, 2, 9), sec(3, baton.Shared, 2, 3, 0, 9, 12)}, ""},
		{"token not increasing", []Section{sec(1, baton.Exclusive, 0, 5, 0, 1, 5), sec(2, baton.Exclusive, 0, 4, 6, 7, 9)}, "did not increase"},
		{"token reused", []Section{sec(1, baton.Exclusive, 0, 5, 0, 1, 5), sec(2, baton.Exclusive, 0, 5, 0, 6, 9)}, "granted twice"},
		{"concurrent callers may get either order", []Section{sec(1, baton.Shared, 0, 2, 0, 3, 5), sec(2, baton.Shared, 0, 1, 0, 2, 9)}, ""},
	} {
		h := &History{}
		for _, s := range tc.ops {
			h.Add(s)
		}
		errs := h.Check()
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: unexpected %v", tc.name, errs)
		case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.name, errs, tc.want)
		}
	}
}
