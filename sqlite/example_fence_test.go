package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
)

// The fence kit at a SQL resource: each write checks the writer's token in
// its own transaction, so a holder paused past its lease cannot overwrite
// a newer holder's work.
func Example_fence() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "baton-fence-example")
	defer os.RemoveAll(dir)
	client, _ := baton.Open(ctx, "sqlite://"+filepath.Join(dir, "locks.db"), nil)
	defer client.Close()
	app, _ := sql.Open("sqlite", filepath.Join(dir, "app.db")) // the resource
	defer app.Close()
	fences := fence.Table{Dialect: fence.SQLite} // fence.Postgres, fence.MySQL
	create, _ := fences.CreateSQL()
	app.ExecContext(ctx, create)
	app.ExecContext(ctx, "CREATE TABLE reports (name TEXT PRIMARY KEY, body TEXT)")

	// write stores a report under the lock of the same name, fenced.
	write := func(name string, token uint64, body string) error {
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fence.Admit(ctx, tx.QueryRowContext, fences, name, token); err != nil {
			return err // fence.ErrStale: a newer holder has written
		}
		_, err = tx.ExecContext(ctx, "INSERT OR REPLACE INTO reports VALUES (?, ?)", name, body)
		if err != nil {
			return err
		}
		return tx.Commit()
	}

	first, _ := client.Lock(ctx, "nightly", nil)
	fmt.Println("first:", write("nightly", first.Token(), "draft"))
	first.Release(ctx) // as if its lease had run out during a pause
	second, _ := client.Lock(ctx, "nightly", nil)
	fmt.Println("second:", write("nightly", second.Token(), "final"))
	second.Release(ctx)

	err := write("nightly", first.Token(), "draft, late") // the first resumes
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStale))
	var body string
	app.QueryRowContext(ctx, "SELECT body FROM reports").Scan(&body)
	fmt.Println("report:", body)
	// Output:
	// first: <nil>
	// second: <nil>
	// late write refused: true
	// report: final
}
