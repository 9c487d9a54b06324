package main

// MongoDB, for -target KIND=mongodb://HOST:PORT/DB?…:
//
//	mongo-doc  the bare lock MongoDB users write by hand: an insert of a
//	           document whose _id is the name to acquire (retried 1 ms
//	           apart while the duplicate key says it is held), a delete to
//	           release, both with majority write concern; no TTL, no
//	           fencing token, no queue. It is the floor of a durable lock
//	           on MongoDB: one write to take, one to give.
//
// baton=mongodb://… needs no kind of its own: importing the store
// registers its URL schemes. square/mongo-lock, the reference, is not on
// the Go module proxy, so it has no kind here: BENCHMARKS.md says how a
// bench with a mongo-lock kind was built outside this repository to run
// the two side by side.

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	_ "github.com/baton-go/baton/mongo"
)

func init() {
	kinds["mongo-doc"] = mongoDocTarget
}

func mongoDocTarget(raw string) Target {
	return Target{Name: "mongo-doc", New: func(ctx context.Context) (Locker, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		db := strings.TrimPrefix(u.Path, "/")
		if db == "" {
			db = "bench"
		}
		c, err := mongo.Connect(options.Client().ApplyURI(raw))
		if err != nil {
			return nil, err
		}
		coll := c.Database(db).Collection("mongo_doc_bench", options.Collection().SetWriteConcern(writeconcern.Majority()))
		return &mongoDocLocker{c: c, coll: coll}, nil
	}}
}

type mongoDocLocker struct {
	c    *mongo.Client
	coll *mongo.Collection
}

func (l *mongoDocLocker) Lock(ctx context.Context, name string) (func() error, error) {
	for {
		_, err := l.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: name}})
		if err == nil {
			return func() error {
				_, err := l.coll.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: name}})
				return err
			}, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return nil, fmt.Errorf("mongo-doc: %w", err)
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l *mongoDocLocker) Close() error { return l.c.Disconnect(context.Background()) }
