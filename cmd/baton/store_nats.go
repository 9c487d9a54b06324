//go:build nats || all

package main

import _ "github.com/baton-go/baton/nats"
