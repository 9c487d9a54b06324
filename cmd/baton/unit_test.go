package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		pos, rest []string
		dash      bool
		shared    bool
		ttl       time.Duration
	}{
		{[]string{"x", "--", "a", "-b", "--", "c"}, []string{"x"}, []string{"a", "-b", "--", "c"}, true, false, time.Second},
		{[]string{"--shared", "x", "--ttl", "5s", "--", "a"}, []string{"x"}, []string{"a"}, true, true, 5 * time.Second},
		{[]string{"x", "-ttl=5s", "-shared", "--", "a"}, []string{"x"}, []string{"a"}, true, true, 5 * time.Second},
		{[]string{"x", "--shared=false", "y"}, []string{"x", "y"}, nil, false, false, time.Second},
		{[]string{"-", "x"}, []string{"-", "x"}, nil, false, false, time.Second},
	} {
		fs := newFlagSet("t")
		shared := fs.Bool("shared", false, "")
		ttl := fs.Duration("ttl", time.Second, "")
		pos, rest, dash, err := parseArgs(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || !slices.Equal(rest, tc.rest) || dash != tc.dash || *shared != tc.shared || *ttl != tc.ttl {
			t.Errorf("parseArgs(%q) = %q, %q, %v, %v (shared %v, ttl %v)", tc.args, pos, rest, dash, err, *shared, *ttl)
		}
	}
	fs := newFlagSet("t")
	fs.Duration("ttl", time.Second, "")
	if _, _, _, err := parseArgs(fs, []string{"x", "--ttl"}); err == nil {
		t.Error("parseArgs accepted --ttl without a value")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"mem://":                               "mem://",
		"sqlite:///var/lib/x.db":               "sqlite:///var/lib/x.db",
		"postgres://u:secret@db:5432/locks":    "postgres://u@db:5432/locks",
		"redis://:secret@db:6379/0":            "redis://@db:6379/0",
		"postgres://db/locks?password=x&ssl=1": "postgres://db/locks?ssl=1",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		420 * time.Millisecond:                      "400ms",
		3210 * time.Millisecond:                     "3.2s",
		42*time.Second + 400*time.Millisecond:       "42s",
		3*time.Minute + 20*time.Second:              "3m20s",
		2*time.Hour + 5*time.Minute + 3*time.Second: "2h5m",
		3*24*time.Hour + 4*time.Hour:                "3d4h",
		-5 * time.Second:                            "-5s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
