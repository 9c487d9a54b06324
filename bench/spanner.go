package main

// Cloud Spanner, for -target spanner-fake=DB (DB defaults to
// projects/bench/instances/bench/databases/bench): baton's Spanner store on
// the official client's in-process fake (spannertest), started by this
// process. Its figures measure the client library, gRPC and the fake, not
// Spanner. baton=spanner://… measures a real database or emulator (set
// SPANNER_EMULATOR_HOST for the latter; the table must exist, or add
// ?create=true).

import (
	"context"
	"fmt"
	"os"
	"sync"

	"cloud.google.com/go/spanner/spannertest"

	"github.com/baton-go/baton"
	batonspanner "github.com/baton-go/baton/spanner"
)

func init() {
	kinds["spanner-fake"] = spannerFakeTarget
}

var startFake = sync.OnceValue(func() error {
	srv, err := spannertest.NewServer("127.0.0.1:0")
	if err != nil {
		return err
	}
	srv.SetLogger(func(string, ...any) {})
	return os.Setenv("SPANNER_EMULATOR_HOST", srv.Addr)
})

func spannerFakeTarget(db string) Target {
	if db == "" {
		db = "projects/bench/instances/bench/databases/bench"
	}
	var once sync.Once
	var setupErr error
	return Target{Name: "baton-spanner (fake)", New: func(ctx context.Context) (Locker, error) {
		once.Do(func() {
			if setupErr = startFake(); setupErr == nil {
				setupErr = batonspanner.CreateTable(ctx, db, batonspanner.DefaultTable)
			}
		})
		if setupErr != nil {
			return nil, fmt.Errorf("starting the Spanner fake: %w", setupErr)
		}
		c, err := baton.Open(ctx, "spanner://"+db, nil)
		if err != nil {
			return nil, err
		}
		return batonLocker{c}, nil
	}}
}
