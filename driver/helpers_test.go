package driver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
)

func TestFillZero(t *testing.T) {
	type opts struct {
		Table string
		TTL   time.Duration
		On    bool
		List  []string
	}
	fromURL := &opts{Table: "url", TTL: time.Second, On: true, List: []string{"u"}}
	got := driver.FillZero(&opts{Table: "mine"}, fromURL)
	if got.Table != "mine" || got.TTL != time.Second || !got.On || len(got.List) != 1 {
		t.Errorf("FillZero = %+v: the caller's field must win, the URL's fill the zero ones", got)
	}
	if got := driver.FillZero(nil, fromURL); got.Table != "url" {
		t.Errorf("FillZero(nil, …) = %+v", got)
	}
	mine := &opts{}
	if got := driver.FillZero(mine, nil); got == mine {
		t.Error("FillZero returned the caller's Options, not a copy")
	}
}

func TestEscapeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"aZ9-_", "aZ9-%5F"},
		{"a/b.c é", "a%2Fb%2Ec%20%C3%A9"},
		{"%", "%25"},
	} {
		if got := driver.EscapeName(tc.in, '%', "-"); got != tc.want {
			t.Errorf("EscapeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := driver.EscapeName("a_b-c", '%', "-_"); got != "a_b-c" {
		t.Errorf("kept bytes escaped: %q", got)
	}
}

func TestParseURLHidesTheURL(t *testing.T) {
	_, err := driver.ParseURL("redis://user:s3cret@host:port%zz/0")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("ParseURL of a bad URL: %v, want an error without the password", err)
	}
	if u, err := driver.ParseURL("redis://h:1/0"); err != nil || u.Host != "h:1" {
		t.Errorf("ParseURL of a good URL: %v, %v", u, err)
	}
}

func TestBusyNames(t *testing.T) {
	var none driver.BusyNames
	none.Mark("a")
	if none.Recent("a") {
		t.Error("the zero BusyNames remembered a name")
	}
	b := driver.BusyNames{For: time.Hour, Max: 2}
	b.Mark("a")
	if !b.Recent("a") || b.Recent("b") {
		t.Error("Recent does not tell the marked name from another")
	}
	b.Mark("b")
	b.Mark("c") // beyond Max: the others are forgotten
	if b.Recent("a") || b.Recent("b") || !b.Recent("c") {
		t.Error("beyond Max, the names marked before are still remembered")
	}
	short := driver.BusyNames{For: time.Nanosecond, Max: 2}
	short.Mark("a")
	time.Sleep(time.Millisecond)
	if short.Recent("a") {
		t.Error("a name is remembered longer than For")
	}
}
