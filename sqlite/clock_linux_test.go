//go:build linux

package sqlite

import "testing"

func TestParseMonoOffset(t *testing.T) {
	for in, want := range map[string]int64{
		"monotonic           0         0\nboottime            0         0\n": 0,
		"monotonic       86400         5\nboottime        86400         0\n": 86400e9 + 5,
		"monotonic      -3600         0\n":                                   -3600e9,
		"":                                                                   0,
		"boottime 7 0\n":                                                     0,
	} {
		if got := parseMonoOffset(in); got != want {
			t.Errorf("parseMonoOffset(%q) = %d, want %d", in, got, want)
		}
	}
}
