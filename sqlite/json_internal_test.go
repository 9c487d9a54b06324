package sqlite

import (
	stdjson "encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// The store encodes and decodes its records with goccy/go-json (several
// times faster), while processes of earlier versions of this package,
// sharing the file, use the standard library's: each must read what the
// other writes as the other would, and bad input must be an error, never
// a panic.
func TestRecordJSONAsStandard(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "owner-1", "<&>", "ünïcødé ✓", "quote\"back\\slash", "ctl\x01\t\n", "bad\xffutf8", "\u2028\u2029"}
	str := func() string { return strs[rng.IntN(len(strs))] + strconv.Itoa(rng.IntN(3)) }
	tm := func() time.Time {
		if rng.IntN(5) == 0 {
			return time.Time{}
		}
		return time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).UTC()
	}
	entries := func() []lockstate.Entry {
		var es []lockstate.Entry
		for range rng.IntN(4) {
			e := lockstate.Entry{
				Owner: str(), Mode: driver.Mode(rng.IntN(2)), Limit: rng.IntN(3), Token: rng.Uint64(),
				Host: str(), TTL: time.Duration(rng.Int64()), HoldTTL: time.Duration(rng.Int64N(1e12)),
				Created: tm(), Renewed: tm(), Expires: tm(), Session: str(),
			}
			if rng.IntN(2) == 0 {
				e.Meta = map[string]string{str(): str(), str(): str()}
			}
			es = append(es, e)
		}
		return es
	}
	for i := range 2000 {
		r := record{Boot: str(), Wall: rng.Int64(), Epoch: epochN(rng.Uint64N(1 << 32))}
		r.Seq, r.Ticket, r.Holders, r.Queue = rng.Uint64(), rng.Uint64(), entries(), entries()
		if rng.IntN(2) == 0 {
			r.Bells = map[string]string{str(): str()}
		}
		var vs []any = []any{&r, &boundRecord{Boot: r.Boot, Wall: r.Wall, Epoch: strconv.FormatUint(uint64(r.Epoch), 10), Bells: r.Bells, State: r.State}}
		for _, v := range vs {
			want, err := stdjson.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gojson.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var a, b, c record
			if err := stdjson.Unmarshal(want, &a); err != nil {
				t.Fatal(err)
			}
			if err := decodeRecord(want, &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("record %d: decoded as\n%+v\nwhere encoding/json reads\n%+v", i, b, a)
			}
			// The same record, though not always the same bytes: map
			// keys beyond ASCII may come in another order.
			if err := stdjson.Unmarshal(got, &c); err != nil {
				t.Fatalf("record %d: encoding/json cannot read\n%s\n%v", i, got, err)
			}
			if !reflect.DeepEqual(a, c) {
				t.Fatalf("record %d: encoded as\n%s\nwhich encoding/json reads as\n%+v\nnot\n%+v", i, got, c, a)
			}
			mutate(t, rng, want)
		}
	}
	// What encoding/json refuses, so does the store.
	// (Each record above was also read with bytes changed: see mutate.)
	for _, bad := range []string{`{"seq":-1}`, `{"e":"x"}`, `{"holders":{}}`, `{"seq":1`, `[]`, `{"queue":[{"created":"yesterday"}]}`} {
		var a, b record
		errA, errB := stdjson.Unmarshal([]byte(bad), &a), decodeRecord([]byte(bad), &b)
		if (errA == nil) != (errB == nil) {
			t.Errorf("%s: encoding/json says %v, the store %v", bad, errA, errB)
		}
	}
}

// mutate reads data with bytes changed, dropped or repeated, by both
// decoders: goccy/go-json may not panic, and where the bytes are valid
// UTF-8 and encoding/json reads them, it must read the same record.
func mutate(t *testing.T, rng *rand.Rand, data []byte) {
	t.Helper()
	for range 20 {
		m := append([]byte(nil), data...)
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(m))
			switch rng.IntN(3) {
			case 0:
				m[i] = "{}[]\",:0123456789-.etrufalsn \\u\xff"[rng.IntN(26)]
			case 1:
				m = append(m[:i], m[i+1:]...)
			default:
				m = append(m[:i], append([]byte{m[i]}, m[i:]...)...)
			}
			if len(m) == 0 {
				return
			}
		}
		var a, b record
		errA := stdjson.Unmarshal(m, &a)
		errB := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s: goccy/go-json panics: %v", m, p)
				}
			}()
			return gojson.Unmarshal(m, &b)
		}()
		if !utf8.Valid(m) {
			// Bytes no encoder writes: the two replace invalid UTF-8
			// differently.
			continue
		}
		if errA == nil && errB == nil && !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: decoded as\n%+v\nwhere encoding/json reads\n%+v", m, b, a)
		}
		if errA == nil && errB != nil {
			t.Fatalf("%s: refused (%v), where encoding/json reads it", m, errB)
		}
	}
}
