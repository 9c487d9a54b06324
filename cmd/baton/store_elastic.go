//go:build elastic || all

package main

import _ "github.com/baton-go/baton/elastic"
