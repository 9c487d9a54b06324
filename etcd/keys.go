package etcd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"maps"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/driver"
)

// encodeName is the path segment of a lock name: its bytes in lower-case
// hex. It holds only [0-9a-f], so no name can reach outside its segment,
// and it keeps order and prefixes: name a is a prefix of name b exactly
// when encodeName(a) is a prefix of encodeName(b).
func encodeName(name string) string { return hex.EncodeToString([]byte(name)) }

// nameRange is the common prefix of every key of a name.
func (s *Store) nameRange(name string) string { return s.prefix + encodeName(name) + "/" }

// key is the key of owner's request for name.
func (s *Store) key(name, owner string) string { return s.nameRange(name) + owner }

// splitKey returns the name and owner of a key of the store.
func (s *Store) splitKey(k string) (name, owner string, ok bool) {
	rest, ok := strings.CutPrefix(k, s.prefix)
	if !ok {
		return "", "", false
	}
	enc, owner, ok := strings.Cut(rest, "/")
	if !ok || owner == "" {
		return "", "", false
	}
	b, err := hex.DecodeString(enc)
	if err != nil || len(b) == 0 {
		return "", "", false
	}
	return string(b), owner, true
}

// value is what a key holds.
type value struct {
	Name    string            `json:"name"`
	Mode    driver.Mode       `json:"mode"`
	Limit   int               `json:"limit,omitempty"`
	Host    string            `json:"host,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	TTL     time.Duration     `json:"ttl"`
	Created time.Time         `json:"created"` // client clock, for display
}

func newValue(req *driver.Request, created time.Time) value {
	return value{Name: req.Name, Mode: req.Mode, Limit: req.Limit, Host: req.Host,
		Meta: maps.Clone(req.Meta), TTL: req.TTL, Created: created.Round(0)}
}

func (v *value) encode() string {
	b, _ := json.Marshal(v)
	return string(b)
}

// sameAs reports whether v already records req (nothing to rewrite).
func (v *value) sameAs(req *driver.Request) bool {
	return v.Host == req.Host && v.TTL == req.TTL && maps.Equal(v.Meta, req.Meta)
}

// entry is one key of a name: a holder or a waiter.
type entry struct {
	key   string
	owner string
	rev   int64 // create revision: queue order and fencing token
	lease clientv3.LeaseID
	v     value
	ok    bool // the value parsed; a key that does not is taken as exclusive
}

func (e *entry) exclusive() bool { return !e.ok || e.v.Mode != driver.Shared }

// entries parses a name's keys, in create-revision order (as read).
func entries(rng string, kvs []*mvccpb.KeyValue) []entry {
	es := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		k := string(kv.Key)
		owner, ok := strings.CutPrefix(k, rng)
		if !ok || owner == "" {
			continue
		}
		e := entry{key: k, owner: owner, rev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}
		e.ok = json.Unmarshal(kv.Value, &e.v) == nil && (e.v.Mode == driver.Exclusive || e.v.Mode == driver.Shared)
		es = append(es, e)
	}
	return es
}

func find(es []entry, key string) int {
	for i := range es {
		if es[i].key == key {
			return i
		}
	}
	return -1
}

// blocker is what a request that is not granted waits for: the deletion of
// one key, or, for a full semaphore, need deletions among the keys ahead.
type blocker struct {
	key  string
	need int
}

// judge applies the grant rules to the i-th key of a name (keys in create
// revision order): it is granted, or blocked by b. A shared key is granted
// when every key ahead of it is shared with its limit, and, for a limit L,
// fewer than L are: the holders are always the first keys, and a key once
// granted stays granted until it goes (package lockstate's rules, by
// position).
func judge(es []entry, i int) (granted bool, b blocker) {
	me := &es[i]
	if me.exclusive() {
		if i == 0 {
			return true, blocker{}
		}
		return false, blocker{key: es[i-1].key}
	}
	for j := i - 1; j >= 0; j-- {
		if es[j].exclusive() || es[j].v.Limit != me.v.Limit {
			return false, blocker{key: es[j].key}
		}
	}
	if me.v.Limit > 0 && i >= me.v.Limit {
		return false, blocker{need: i - me.v.Limit + 1}
	}
	return true, blocker{}
}

// getName is the read of a name's keys in queue order.
func (s *Store) getName(name string) clientv3.Op {
	return clientv3.OpGet(s.nameRange(name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// read returns a name's keys in queue order and the revision read at.
func (s *Store) read(ctx context.Context, name string) ([]entry, int64, error) {
	op := s.getName(name)
	resp, err := s.cli.Do(ctx, op)
	if err != nil {
		return nil, 0, err
	}
	g := resp.Get()
	return entries(s.nameRange(name), g.Kvs), g.Header.Revision, nil
}

// readSince is read for a caller that needs a snapshot at revision rev or
// later: a serializable read, or a linearizable one if the member that
// served it lags behind rev.
func (s *Store) readSince(ctx context.Context, name string, rev int64) ([]entry, int64, error) {
	op := clientv3.OpGet(s.nameRange(name), clientv3.WithPrefix(), clientv3.WithSerializable(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	resp, err := s.cli.Do(ctx, op)
	if err != nil {
		return nil, 0, err
	}
	g := resp.Get()
	if g.Header.Revision < rev {
		return s.read(ctx, name)
	}
	return entries(s.nameRange(name), g.Kvs), g.Header.Revision, nil
}

// holder describes the i-th key of a name for listings.
func holder(name string, es []entry, i int) driver.Holder {
	e := &es[i]
	granted, _ := judge(es, i)
	h := driver.Holder{
		Name: name, Owner: e.owner, Mode: e.v.Mode, Limit: e.v.Limit, Queued: !granted,
		Host: e.v.Host, Meta: maps.Clone(e.v.Meta), TTL: e.v.TTL,
		Created: e.v.Created, Renewed: e.v.Created,
	}
	if !e.ok {
		h.Mode = driver.Exclusive
	}
	if granted {
		h.Token = uint64(e.rev)
	}
	return h
}
