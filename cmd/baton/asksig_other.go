//go:build !unix

package main

import "os"

var askSignals = map[string]os.Signal{"TERM": os.Kill, "KILL": os.Kill, "INT": os.Interrupt}

var stopSignals = []os.Signal{os.Kill, os.Interrupt}
