//go:build etcd || all

package main

import _ "github.com/baton-go/baton/etcd"
