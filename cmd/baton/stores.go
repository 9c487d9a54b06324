package main

// The stores baton knows, besides mem://. SQLite is the default.
import _ "github.com/baton-go/baton/sqlite"
