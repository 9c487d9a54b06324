package mongo_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

// BenchmarkServerFloor measures what bounds an uncontended lock on each
// test server, whatever its design; ns/op is one acquire and release,
// each one write with the store's write concern (majority), and p50-µs
// its median, the bench's statistic:
//   - insert-delete: an insert of {_id: name} and its delete (the bench's
//     mongo-doc: no TTL, no token, no server clock);
//   - plain-update: a lease with a token on an existing document, by
//     update operators: $inc of the token and $set of the holder, then
//     $unset of the holder (no server clock: operators cannot compute an
//     expiry from it);
//   - pipeline-update: the same acquire as a one-stage pipeline update that
//     computes the token and the expiry from the document and $$NOW, as a
//     store that judges by the server's clock must, then the same release;
//   - baton: the store's Acquire and Release of one name (its acquire is a
//     pipeline findAndModify, its release a plain update).
//
// BENCHMARKS.md quotes it.
func BenchmarkServerFloor(b *testing.B) {
	for _, s := range drivertest.Servers(serversEnv) {
		b.Run(s.Name, func(b *testing.B) {
			ctx := context.Background()
			name := fmt.Sprintf("%s_floor_%d", collection, time.Now().UnixNano())
			st, err := batonmongo.Open(ctx, s.URL, &batonmongo.Options{Collection: name})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			coll := st.Collection().Database().Collection(name+"_bare", options.Collection().SetWriteConcern(writeconcern.Majority()))
			defer coll.Drop(context.Background())
			defer st.Collection().Drop(context.Background())
			if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "seq", Value: int64(0)}}); err != nil {
				b.Fatal(err)
			}
			free := bson.D{{Key: "_id", Value: "x"}, {Key: "h", Value: bson.D{{Key: "$exists", Value: false}}}}
			release := bson.D{{Key: "$unset", Value: bson.D{{Key: "h", Value: ""}}}}
			pair := func(b *testing.B, acquire, release func() error) {
				var p p50
				for b.Loop() {
					t0 := time.Now()
					if err := acquire(); err != nil {
						b.Fatal(err)
					}
					if err := release(); err != nil {
						b.Fatal(err)
					}
					p.add(t0)
				}
				p.report(b)
			}
			update := func(filter, u any) func() error {
				return func() error {
					res, err := coll.UpdateOne(ctx, filter, u)
					if err == nil && res.ModifiedCount != 1 {
						err = fmt.Errorf("modified %d documents", res.ModifiedCount)
					}
					return err
				}
			}
			b.Run("insert-delete", func(b *testing.B) {
				pair(b, func() error {
					_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "y"}})
					return err
				}, func() error {
					res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "y"}})
					if err == nil && res.DeletedCount != 1 {
						err = fmt.Errorf("deleted %d documents", res.DeletedCount)
					}
					return err
				})
			})
			b.Run("plain-update", func(b *testing.B) {
				pair(b, update(free, bson.D{
					{Key: "$inc", Value: bson.D{{Key: "seq", Value: int64(1)}}},
					{Key: "$set", Value: bson.D{{Key: "h", Value: bson.A{bson.D{{Key: "o", Value: "own1"}}}}}},
				}), update(bson.D{{Key: "_id", Value: "x"}}, release))
			})
			b.Run("pipeline-update", func(b *testing.B) {
				now := bson.D{{Key: "$multiply", Value: bson.A{bson.D{{Key: "$toLong", Value: "$$NOW"}}, int64(time.Millisecond)}}}
				tok := bson.D{{Key: "$add", Value: bson.A{"$seq", int64(1)}}}
				pair(b, update(free, bson.A{bson.D{{Key: "$set", Value: bson.D{
					{Key: "seq", Value: tok},
					{Key: "h", Value: bson.A{bson.D{{Key: "o", Value: "own1"}, {Key: "t", Value: tok},
						{Key: "x", Value: bson.D{{Key: "$add", Value: bson.A{now, int64(15 * time.Second)}}}}}}},
				}}}}), update(bson.D{{Key: "_id", Value: "x"}}, release))
			})
			req := &driver.Request{Name: "x", Owner: "own1", Mode: driver.Exclusive, TTL: 15 * time.Second}
			b.Run("baton", func(b *testing.B) {
				pair(b, func() error {
					_, err := st.Acquire(ctx, req)
					return err
				}, func() error {
					ok, err := st.Release(ctx, []driver.Key{{Name: "x", Owner: "own1"}})
					if err == nil && !ok[0] {
						err = fmt.Errorf("not released")
					}
					return err
				})
			})
		})
	}
}

// p50 collects the times of one acquire and release, for their median,
// the statistic the bench reports.
type p50 []time.Duration

func (p *p50) add(t0 time.Time) { *p = append(*p, time.Since(t0)) }

func (p p50) report(b *testing.B) {
	slices.Sort(p)
	b.ReportMetric(float64(p[len(p)/2].Microseconds()), "p50-µs")
}
