package records

import (
	"github.com/baton-go/baton/driver/sessions"
)

// Sessions is implemented by Records that keep sessions: a record per
// session with an expiry by the store's clock. A hold granted with
// Request.KeepAlive is bound to the Store's session of its TTL
// (lockstate.Entry.Session) and lives as long as that session does,
// besides its own expiry. The Store renews the session (package
// sessions), one call every third of its TTL, in place of a renewal per
// hold: keeping many locks alive then costs what keeping one does.
//
// A store that implements Sessions applies, in Update and Scan, the
// expiries of the live sessions that holders past their own expiry are
// bound to (lockstate.State.Sessions, ApplySessions). In Update it reads
// them in the same atomic step as the states: a session renewed after a
// state was read could otherwise keep alive a hold the rules dropped.
type Sessions = sessions.Store

// ErrSessionEnded is the error of a session that the store found expired
// or gone when renewing it, or that was not renewed before its deadline.
var ErrSessionEnded = sessions.ErrEnded
