//go:build mysql || all

package main

import (
	"fmt"

	mysqldrv "github.com/go-sql-driver/mysql"

	_ "github.com/baton-go/baton/mysql"
)

// go-sql-driver logs through one process-wide logger, to stderr by
// default: route its lines to baton's --verbose output.
func init() { _ = mysqldrv.SetLogger(mysqlLog{}) }

type mysqlLog struct{}

func (mysqlLog) Print(v ...any) { driverLog("mysql", fmt.Sprint(v...)) }
