package elastic

import (
	"encoding/base64"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// document is what the index holds for one lock name: its whole state.
type document struct {
	Name    string   `json:"name"`
	Seq     uint64   `json:"seq"`    // last fencing token handed out
	Ticket  uint64   `json:"ticket"` // last queue ticket handed out
	Holders []entry  `json:"holders"`
	Queue   []entry  `json:"queue"`
	Owners  []string `json:"owners"` // holders' and waiters' owners, indexed for List
	Now     int64    `json:"now"`    // ms, the server's (cached) clock at the last write
}

// entry is a lockstate.Entry with times in whole milliseconds of the
// server's clock and the TTL in nanoseconds. Fresh marks the times the
// update script must set from the server's clock: 1 for renewed and
// expires, 2 for created.
type entry struct {
	Owner   string            `json:"owner"`
	Mode    driver.Mode       `json:"mode"`
	Limit   int               `json:"limit,omitempty"`
	Token   uint64            `json:"token"`
	Host    string            `json:"host,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	TTL     int64             `json:"ttl"`
	Created int64             `json:"created"`
	Renewed int64             `json:"renewed"`
	Expires int64             `json:"expires"`
	Fresh   int               `json:"fresh,omitempty"`
}

// docID is the document id of a lock name: its base64url encoding behind
// an "x", so that ids never need escaping in a URL, never form a dot
// segment, and never collide. baton's longest name (255 bytes) makes a
// 341-byte id, under the 512-byte limit.
func docID(name string) string { return "x" + base64.RawURLEncoding.EncodeToString([]byte(name)) }

func (d *document) state() *lockstate.State {
	st := &lockstate.State{Seq: d.Seq, Ticket: d.Ticket}
	for _, e := range d.Holders {
		st.Holders = append(st.Holders, e.state())
	}
	for _, e := range d.Queue {
		st.Queue = append(st.Queue, e.state())
	}
	return st
}

func (e *entry) state() lockstate.Entry {
	return lockstate.Entry{
		Owner: e.Owner, Mode: e.Mode, Limit: e.Limit, Token: e.Token, Host: e.Host, Meta: e.Meta,
		TTL: time.Duration(e.TTL), Created: time.UnixMilli(e.Created), Renewed: time.UnixMilli(e.Renewed),
		Expires: time.UnixMilli(e.Expires),
	}
}

// toDocument turns st, evaluated at now, back into a document. Times equal to
// now were set by this evaluation: they are marked fresh for the script,
// which sets them from the server's clock. now is never a whole
// millisecond (see Store.decisionTime), so times read from the index never
// equal it.
func toDocument(name string, st *lockstate.State, now time.Time) *document {
	d := &document{Name: name, Seq: st.Seq, Ticket: st.Ticket, Holders: []entry{}, Queue: []entry{}, Owners: []string{}}
	conv := func(e lockstate.Entry) entry {
		out := entry{
			Owner: e.Owner, Mode: e.Mode, Limit: e.Limit, Token: e.Token, Host: e.Host, Meta: e.Meta,
			TTL: int64(e.TTL), Created: e.Created.UnixMilli(), Renewed: e.Renewed.UnixMilli(), Expires: e.Expires.UnixMilli(),
		}
		if e.Renewed.Equal(now) {
			out.Fresh |= 1
		}
		if e.Created.Equal(now) {
			out.Fresh |= 2
		}
		d.Owners = append(d.Owners, e.Owner)
		return out
	}
	for _, e := range st.Holders {
		d.Holders = append(d.Holders, conv(e))
	}
	for _, e := range st.Queue {
		d.Queue = append(d.Queue, conv(e))
	}
	return d
}

// ceilMs is d in whole milliseconds, rounded up (as the script does).
func ceilMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// fix sets the times of st that the evaluation at now set (equal to now)
// to what the script wrote, given up, the server-clock time it stamped.
func fix(st *lockstate.State, now time.Time, up int64) {
	for _, es := range [][]lockstate.Entry{st.Holders, st.Queue} {
		for i := range es {
			e := &es[i]
			if e.Renewed.Equal(now) {
				e.Renewed, e.Expires = time.UnixMilli(up), time.UnixMilli(up+ceilMs(e.Expires.Sub(now)))
			}
			if e.Created.Equal(now) {
				e.Created = time.UnixMilli(up)
			}
		}
	}
}

// updateScript writes params.doc in place of the document, when the
// document is as expected, with the fresh times set from the server's
// clock. ctx._now is the clock of the node that holds the primary shard,
// as Elasticsearch and OpenSearch cache it: it lags the real time by up to
// thread_pool.estimated_time_interval (200ms by default). So:
//
//   - times written are stamped with up = ctx._now + params.step, never
//     earlier than the real time of the write: a hold granted or renewed
//     for TTL expires in the index no earlier than its holder's own
//     deadline (its call's start plus TTL, on its monotonic clock);
//   - holders and waiters dropped as expired must have expired by
//     ctx._now itself (params.after is the latest of their expiries), never
//     later than the real time.
//
// A refusal is a noop whose returned source says why: "exists" (a document
// was created since it was read as absent) or "clock" (ctx._now has not
// reached params.after yet); the returned source's "now" is ctx._now.
const updateScript = `
long now = ctx._now;
if (params.absent && ctx.op != 'create') { ctx._source.now = now; ctx._source.noop = 'exists'; ctx.op = 'none'; return; }
if (now < params.after) { ctx._source.now = now; ctx._source.noop = 'clock'; ctx.op = 'none'; return; }
long up = now + params.step;
Map d = new HashMap(params.doc);
for (String k : ['holders', 'queue']) {
  List out = new ArrayList();
  for (def e0 : params.doc[k]) {
    Map e = new HashMap(e0);
    def f = e.remove('fresh');
    if (f != null) {
      int fi = ((Number) f).intValue();
      if ((fi & 1) != 0) {
        long ttl = ((Number) e.ttl).longValue();
        e.renewed = up;
        e.expires = up + (ttl + 999999L) / 1000000L;
      }
      if ((fi & 2) != 0) { e.created = up; }
    }
    out.add(e);
  }
  d[k] = out;
}
d.now = now;
ctx._source = d;
`

// indexBody creates the lock index: one shard, so that every lock is
// judged by one node's clock; a replica wherever a second node exists;
// only the fields List searches are indexed.
const indexBody = `{
  "settings": {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1"}},
  "mappings": {"dynamic": false, "properties": {
    "name": {"type": "keyword"},
    "owners": {"type": "keyword"},
    "now": {"type": "date", "format": "epoch_millis"}
  }}
}`
