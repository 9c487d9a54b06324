package spanner

import (
	"encoding/json"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// record is what the state column of a name's current row holds.
type record struct {
	lockstate.State
	// Pending lists the entries this write granted, extended, renewed or
	// queued: their times (and, for new grants, tokens) are not in the
	// entries but come from the row's stamp, the write's commit timestamp,
	// which is known only once the write commits.
	Pending []pending `json:"pending,omitempty"`
}

type pending struct {
	Owner  string `json:"owner"`
	Queued bool   `json:"queued,omitempty"`
	New    bool   `json:"new,omitempty"` // created by this write, not extended
}

// name is one lock name as read in a transaction.
type name struct {
	name  string
	rec   record
	stamp time.Time // commit timestamp of the row's last write
	dirty bool      // rec changed: write it back
}

var cols = []string{"name", "state", "stamp"}

// readRow folds one row of the table into names.
func readRow(r *spanner.Row, names map[string]*name) error {
	var (
		n     string
		state []byte
		stamp spanner.NullTime
	)
	if err := r.Columns(&n, &state, &stamp); err != nil {
		return err
	}
	if n == "" {
		return nil // the clock row
	}
	x := &name{name: n, stamp: stamp.Time}
	if err := json.Unmarshal(state, &x.rec); err != nil {
		return fmt.Errorf("spanner: lock %q: bad state: %w", n, err)
	}
	resolve(&x.rec, x.stamp)
	names[n] = x
	return nil
}

// resolve gives the pending entries of rec the times of the write that
// made them, committed at ts, and new holders their tokens: the commit
// timestamp in microseconds, or one more than the last token if that is
// not larger (two commits in one microsecond, a clock that went back).
func resolve(rec *record, ts time.Time) {
	for _, p := range rec.Pending {
		es := rec.Holders
		if p.Queued {
			es = rec.Queue
		}
		for i := range es {
			e := &es[i]
			if e.Owner != p.Owner {
				continue
			}
			e.Renewed, e.Expires = ts, ts.Add(e.TTL)
			if p.New {
				e.Created = ts
				if !p.Queued {
					e.Token = max(uint64(ts.UnixMicro()), e.Token)
					rec.Seq = max(rec.Seq, e.Token)
				}
			}
			break
		}
	}
	rec.Pending = nil
}

// mark records that this write touched owner's entry.
func (x *name) mark(owner string, queued, isNew bool) {
	for i, p := range x.rec.Pending {
		if p.Owner == owner && p.Queued == queued {
			x.rec.Pending[i].New = p.New || isNew
			return
		}
	}
	x.rec.Pending = append(x.rec.Pending, pending{Owner: owner, Queued: queued, New: isNew})
}

// mutation writes x's new state, stamped with the commit timestamp. The
// transaction's locks on the row it read (or on its absent key) make the
// write conflict with any other that read it meanwhile.
func (x *name) mutation(table string) (*spanner.Mutation, error) {
	state, err := json.Marshal(&x.rec)
	if err != nil {
		return nil, err
	}
	return spanner.InsertOrUpdate(table, cols, []any{x.name, state, spanner.CommitTimestamp}), nil
}

// grant is the entry of a grant or renewal of owner, resolved.
func grantOf(rec *record, owner string) *driver.Grant {
	for _, e := range rec.Holders {
		if e.Owner == owner {
			return &driver.Grant{Token: e.Token, Created: e.Created, Renewed: e.Renewed, Expires: e.Expires}
		}
	}
	return nil
}

// keyRange selects every row of one lock name.
func keyRange(n string) spanner.KeyRange {
	return spanner.KeyRange{Start: spanner.Key{n}, End: spanner.Key{n}, Kind: spanner.ClosedClosed}
}

// prefixKeys selects every row whose name starts with prefix: the names
// from prefix up to (excluding) prefix with its last character replaced by
// the next one (strings compare by UTF-8 bytes, which is code point order).
func prefixKeys(prefix string) spanner.KeySet {
	rs := []rune(prefix)
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i] + 1
		if r == 0xD800 {
			r = 0xE000 // skip surrogates
		}
		if r <= 0x10FFFF {
			end := string(rs[:i]) + string(r)
			return spanner.KeyRange{Start: spanner.Key{prefix}, End: spanner.Key{end}, Kind: spanner.ClosedOpen}
		}
	}
	return spanner.AllKeys()
}
