package postgres

import (
	"regexp"
	"strings"
	"testing"
)

// The functions run with enable_seqscan off, under which PostgreSQL 17
// and earlier cost a sequential scan high enough to compile the statement
// with JIT (30-150 ms a call). Every statement that reads or updates a
// one-row table must therefore find its row by the key.
func TestOneRowTablesReadByKey(t *testing.T) {
	use := regexp.MustCompile(`(?:FROM|UPDATE|JOIN|,)\s+\{(?:INCARNATION|EPOCHS)\}\s+(\w+)`)
	var lines []string
	for l := range strings.SplitSeq(schemaSQL, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		lines = append(lines, l)
	}
	sql := strings.Join(lines, "\n")
	n := 0
	for _, m := range use.FindAllStringSubmatchIndex(sql, -1) {
		alias := sql[m[2]:m[3]]
		stmt := sql[m[0]:]
		if end := strings.Index(stmt, ";"); end >= 0 {
			stmt = stmt[:end]
		}
		if !regexp.MustCompile(`\b` + alias + `\.id\b`).MatchString(stmt) {
			t.Errorf("a statement reads a one-row table without its key (%s.id): %s", alias, stmt)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("found %d uses of the one-row tables, want at least 10: the check no longer parses the script", n)
	}
}
