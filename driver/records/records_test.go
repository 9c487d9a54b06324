package records_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/records"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mem"
)

// Each client opened here is a Store of its own over one in-memory table,
// as processes share a database: a wait across clients is woken by
// polling alone.
func TestConformancePolling(t *testing.T) {
	table := mem.New().Records()
	drivertest.Run(t, drivertest.Config{
		Open: func(testing.TB) driver.Store {
			return records.New(table, &records.Options{Poll: 20 * time.Millisecond})
		},
	})
}

func TestModel(t *testing.T) {
	table := mem.New().Records()
	drivertest.Model(t, drivertest.ModelConfig{
		Open: func(testing.TB) driver.Store { return records.New(table, nil) },
	})
}
