package spanner

import (
	"encoding/json"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

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

// touched records, as pending, the entries a decision at now set (their
// renewal time is now) and, as new, those it created (their creation
// time is now): their times, and the tokens of new holds (above seq, the
// counter it read), are the commit's, known once it commits.
func (x *name) touched(now time.Time, seq uint64) {
	x.rec.Pending = x.rec.Pending[:0]
	for _, es := range []struct {
		es     []lockstate.Entry
		queued bool
	}{{x.rec.Holders, false}, {x.rec.Queue, true}} {
		for _, e := range es.es {
			if e.Renewed.Equal(now) {
				x.rec.Pending = append(x.rec.Pending, pending{Owner: e.Owner, Queued: es.queued, New: e.Created.Equal(now) && (es.queued || e.Token > seq)})
			}
		}
	}
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
