package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/baton-go/baton"
	_ "github.com/baton-go/baton/sqlite" // registers sqlite:// with baton.Open
)

// The README's example: one job at a time across every process of the
// machine that shares the file.
func Example() {
	ctx := context.Background()
	if err := nightlyReport(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: holding nightly-report with token 1
}

func nightlyReport(ctx context.Context) error {
	os.Remove("/tmp/locks.db") // a fresh file for the example's output
	client, err := baton.Open(ctx, "sqlite:///tmp/locks.db", nil)
	if err != nil {
		return err
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "nightly-report", nil) // waits, bounded by ctx
	if err != nil {
		return err
	}
	defer lease.Release(ctx)

	// Pass lease.Token() to what the job writes to; stop when <-lease.Done().
	fmt.Println("holding nightly-report with token", lease.Token())
	return nil
}

// Two processes share a lock through one SQLite file: each opens the file
// with its own client (here two clients of one program stand for two
// processes; scripts run `baton run` for the same effect).
func Example_twoProcesses() {
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(os.TempDir(), fmt.Sprintf("baton-example-%d.db", os.Getpid()))
	defer os.Remove(db[len("sqlite://"):])

	first, _ := baton.Open(ctx, db, nil)  // process 1
	second, _ := baton.Open(ctx, db, nil) // process 2
	defer first.Close()
	defer second.Close()

	held, _ := first.Lock(ctx, "deploy", nil)
	_, err := second.TryLock(ctx, "deploy", nil)
	fmt.Println("second process while the first holds:", errors.Is(err, baton.ErrLocked))

	held.Release(ctx)
	l, _ := second.TryLock(ctx, "deploy", nil)
	fmt.Println("second process after the release: token", l.Token())
	// Output:
	// second process while the first holds: true
	// second process after the release: token 2
}
