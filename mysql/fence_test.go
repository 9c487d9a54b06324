package mysql_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/fence/fencetest"
)

// The fence kit on MySQL and MariaDB, through database/sql.
func TestFence(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := fence.Table{Dialect: fence.MySQL, Name: fmt.Sprintf("baton_fence_%04x", rand.Uint32N(1<<16))}
		fencetest.Run(t, rawDB(t), tb)
	})
}
