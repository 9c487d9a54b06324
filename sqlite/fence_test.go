package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/fence/fencetest"
)

// The fence kit on SQLite, through database/sql.
func TestFence(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fencetest.Run(t, db, fence.Table{Dialect: fence.SQLite, Name: "fences"})
}
