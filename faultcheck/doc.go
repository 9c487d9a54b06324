// Package faultcheck is baton's Jepsen-style fault harness: it runs many
// client processes against one store, through a fault-injecting TCP proxy
// per client, while it kills (SIGKILL) and pauses (SIGSTOP/SIGCONT) the
// holders, restarts and crashes the server and starts clients with jumped
// clocks; it records every operation with its result, and checks the
// history:
//
//  1. the fenced resource (package fenced) never accepted a write of an
//     older token after a newer one, and no holder's critical section is
//     interleaved with another's accepted writes;
//  2. fencing tokens strictly increase per lock name, in an order
//     consistent with real time (checked with porcupine, a
//     linearizability checker, against a model of a counter);
//  3. from the holders' own view, judged on their monotonic clocks, no
//     exclusive holds overlap and no semaphore has more than its limit;
//  4. a lock whose exclusive holder was killed is granted again within
//     the stated bound ([Bound]).
//
// [Run] runs it against one entry of [Stores]; TestShort runs every store
// briefly (part of scripts/test), the faultcheck command runs a soak and
// writes a report. See README.md for what is tested and what is
// guaranteed, store by store.
package faultcheck
