package main

// The stores baton knows, besides mem://. SQLite is the default. The tool
// takes every store; a program that imports baton takes only those it
// imports.
import (
	_ "github.com/baton-go/baton/elastic"
	_ "github.com/baton-go/baton/etcd"
	_ "github.com/baton-go/baton/mongo"
	_ "github.com/baton-go/baton/mysql"
	_ "github.com/baton-go/baton/postgres"
	_ "github.com/baton-go/baton/redis"
	_ "github.com/baton-go/baton/spanner"
	_ "github.com/baton-go/baton/sqlite"
	_ "github.com/baton-go/baton/zookeeper"
)
