package main

// Cloud Spanner, for -target spanner-emulator=HOST:PORT: baton's Spanner
// store on the emulator at HOST:PORT (scripts/servers up emulator), in a
// database of its own (projects/bench/instances/bench/databases/bench) that
// this target creates. baton=spanner://… measures a real database (the
// table must exist, or add ?create=true).

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/baton-go/baton"
	batonspanner "github.com/baton-go/baton/spanner"
)

func init() {
	kinds["spanner-emulator"] = spannerEmulatorTarget
}

const benchSpannerDB = "projects/bench/instances/bench/databases/bench"

func spannerEmulatorTarget(addr string) Target {
	var once sync.Once
	var setupErr error
	return Target{Name: "baton-spanner (emulator)", New: func(ctx context.Context) (Locker, error) {
		once.Do(func() { setupErr = setupEmulator(ctx, addr) })
		if setupErr != nil {
			return nil, fmt.Errorf("setting up the Spanner emulator at %s: %w", addr, setupErr)
		}
		c, err := baton.Open(ctx, "spanner://"+benchSpannerDB, nil)
		if err != nil {
			return nil, err
		}
		return batonLocker{c}, nil
	}}
}

// setupEmulator points the Spanner client at the emulator and creates the
// bench's database and lock table there.
func setupEmulator(ctx context.Context, addr string) error {
	if err := os.Setenv("SPANNER_EMULATOR_HOST", addr); err != nil {
		return err
	}
	if err := batonspanner.CreateEmulatorDatabase(ctx, benchSpannerDB); err != nil {
		return err
	}
	return batonspanner.CreateTable(ctx, benchSpannerDB, batonspanner.DefaultTable)
}
