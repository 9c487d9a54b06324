//go:build postgres || all

package main

import _ "github.com/baton-go/baton/postgres"
