package main

// MongoDB: baton=mongodb://… needs no kind of its own: importing the store
// registers its URL schemes. square/mongo-lock, the reference, is not on
// the Go module proxy, so it has no kind here (see BENCHMARKS.md for how
// it was measured side by side).

import _ "github.com/baton-go/baton/mongo"
