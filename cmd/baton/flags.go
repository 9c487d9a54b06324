package main

import (
	"errors"
	"flag"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// durationValue is a flag.Value for a duration written as a Go duration
// (1m30s, 500ms) or as a plain number of seconds (90, 0.5), as flock's
// and timeout's do.
type durationValue time.Duration

func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// parseDuration reads a Go duration or a number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "xXpPiInN_") {
		if math.Abs(f*float64(time.Second)) > math.MaxInt64 {
			return 0, errors.New("out of range")
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 30s, 1m30s or 500ms, or a number of seconds")
	}
	return d, nil
}

// longFlag is a flag of more than one letter as the flag package spells
// it in its messages ("invalid value "x" for flag -ttl: ...").
var longFlag = regexp.MustCompile(`(^|\s)-([a-z][a-z0-9-]+)(:|$)`)

// flagErr rewrites the flag package's messages, which spell flags with one
// dash, with the two dashes of baton's help (-n stays -n).
func flagErr(err error) error {
	msg := strings.Replace(err.Error(), "flag provided but not defined", "unknown flag", 1)
	return errors.New(longFlag.ReplaceAllString(msg, "$1--$2$3"))
}
