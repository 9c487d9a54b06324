package main

// MongoDB: baton=mongodb://… needs no kind of its own: importing the store
// registers its URL schemes. square/mongo-lock, the reference, is not on
// the Go module proxy, so it has no kind here: BENCHMARKS.md says how a
// bench with a mongo-lock kind was built outside this repository to run
// the two side by side.

import _ "github.com/baton-go/baton/mongo"
