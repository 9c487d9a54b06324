// Package fencetest checks a fence.Table on a real SQL database. The
// tests of baton's SQL store modules run it against their servers.
package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/fence"
)

// Run checks fence.Admit on table tb of db, which it creates, with a
// table of its own named tb.Name+"_log" for the writes it fences; it
// drops both at the end. db must let two transactions run at once (on
// SQLite: wait for the write lock, as busy_timeout does).
func Run(t *testing.T, db *sql.DB, tb fence.Table) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create, err := tb.CreateSQL()
	if err != nil {
		t.Fatal(err)
	}
	logTable := tb.Name + "_log"
	logDDL := map[fence.Dialect]string{
		fence.Postgres: "CREATE TABLE " + logTable + " (seq bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL)",
		fence.MySQL:    "CREATE TABLE " + logTable + " (seq BIGINT AUTO_INCREMENT PRIMARY KEY, name VARBINARY(255) NOT NULL, token BIGINT UNSIGNED NOT NULL)",
		fence.SQLite:   "CREATE TABLE " + logTable + " (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, token INTEGER NOT NULL)",
	}[tb.Dialect]
	drop := func() {
		for _, n := range []string{tb.Name, logTable} {
			db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+n)
		}
	}
	drop()
	t.Cleanup(drop)
	for _, q := range []string{create, create, logDDL} { // CreateSQL twice: it is idempotent
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insert := "INSERT INTO " + logTable + " (name, token) VALUES (?, ?)"
	if tb.Dialect == fence.Postgres {
		insert = "INSERT INTO " + logTable + " (name, token) VALUES ($1, $2)"
	}

	// write admits token for name and logs it, in one transaction that
	// commits only if the token was admitted; before runs first in it.
	write := func(name string, token uint64, before func(*sql.Tx) error, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if before != nil {
			if err := before(tx); err != nil {
				return err
			}
		}
		if err := fence.Admit(ctx, tx.QueryRowContext, tb, name, token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insert, name, int64(token)); err != nil {
			return err
		}
		if !commit {
			return nil
		}
		return tx.Commit()
	}
	stale := func(err error, token, highest uint64) bool {
		var se *fence.StaleError
		return errors.As(err, &se) && errors.Is(err, fence.ErrStale) && se.Token == token && se.Highest == highest
	}

	t.Run("Sequence", func(t *testing.T) {
		name := "seq/é ' \" ; --" // quoting is the driver's, never the kit's
		for _, s := range []struct {
			token   uint64
			commit  bool
			highest uint64 // 0: admitted
		}{
			{5, true, 0}, {5, true, 0}, {4, true, 5}, {9, false, 0}, {8, true, 0}, {1 << 40, true, 0}, {7, true, 1 << 40},
		} {
			err := write(name, s.token, nil, s.commit)
			if s.highest == 0 && err != nil || s.highest != 0 && !stale(err, s.token, s.highest) {
				t.Fatalf("token %d (highest %d): %v", s.token, s.highest, err)
			}
		}
		if err := write("another", 1, nil, true); err != nil {
			t.Fatalf("another name: %v", err)
		}
	})

	t.Run("StaleWaitsForTheNewerCommit", func(t *testing.T) {
		// a admits 20 and has not committed; b, with 19, must wait for a's
		// commit and then be refused. b reads first, so that on MySQL its
		// snapshot predates a's commit.
		// The name's row exists before: b's snapshot sees an older token.
		if err := write("wait", 10, nil, true); err != nil {
			t.Fatal(err)
		}
		a, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		if err := fence.Admit(ctx, a.QueryRowContext, tb, "wait", 20); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		start := make(chan struct{})
		go func() {
			done <- write("wait", 19, func(tx *sql.Tx) error {
				if tb.Dialect == fence.SQLite {
					close(start) // SQLite: one writer; b waits in Admit for the lock
					return nil
				}
				var n int
				err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+logTable).Scan(&n)
				close(start)
				return err
			}, true)
		}()
		<-start
		select {
		case err := <-done:
			t.Fatalf("b finished while a held the fence: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !stale(err, 19, 20) {
			t.Fatalf("b: %v, want stale (19 < 20)", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Writers with random tokens: the writes that commit, in the order
		// the fence serialized them, have tokens that never go down.
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		var admitted, refused int
		var mu sync.Mutex
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for range 25 {
					err := write("conc", r.Uint64N(100)+1, nil, true)
					mu.Lock()
					switch {
					case err == nil:
						admitted++
					case errors.Is(err, fence.ErrStale):
						refused++
					case isBusy(err):
						// the server's own conflict answer: nothing written
					default:
						errs <- err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		rows, err := db.QueryContext(ctx, "SELECT token FROM "+logTable+" WHERE name = 'conc' ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var last, n int64
		for rows.Next() {
			var tok int64
			if err := rows.Scan(&tok); err != nil {
				t.Fatal(err)
			}
			if tok < last {
				t.Fatalf("write %d has token %d after %d", n, tok, last)
			}
			last, n = tok, n+1
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != int64(admitted) || admitted == 0 || refused == 0 {
			t.Fatalf("%d writes logged, %d admitted, %d refused", n, admitted, refused)
		}
	})
}

// isBusy reports a deadlock or serialization answer, which a writer
// retries: the kit does not hide them.
func isBusy(err error) bool {
	s := strings.ToLower(fmt.Sprint(err))
	return strings.Contains(s, "deadlock") || strings.Contains(s, "could not serialize") || strings.Contains(s, "database is locked")
}
