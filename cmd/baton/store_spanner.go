//go:build spanner || all

package main

import _ "github.com/baton-go/baton/spanner"
