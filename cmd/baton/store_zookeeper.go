//go:build zookeeper || all

package main

import _ "github.com/baton-go/baton/zookeeper"
