//go:build mongo || all

package main

import _ "github.com/baton-go/baton/mongo"
