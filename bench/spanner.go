package main

// Cloud Spanner, for -target spanner-emulator=HOST:PORT: baton's Spanner
// store on the emulator at HOST:PORT (scripts/servers up emulator), in a
// database of its own (projects/bench/instances/bench/databases/bench)
// that this target creates, with the store's default poll (25 ms). Every
// client counts its RPCs to the server (unary and streaming), for the
// failover workload's calls per second. baton=spanner://… measures a real
// database (the table must exist, or add ?create=true).

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/baton-go/baton"
	batonspanner "github.com/baton-go/baton/spanner"
)

func init() {
	kinds["spanner-emulator"] = spannerEmulatorTarget
}

const benchSpannerDB = "projects/bench/instances/bench/databases/bench"

func spannerEmulatorTarget(addr string) Target {
	var once sync.Once
	var setupErr error
	var calls atomic.Int64
	setup := func(ctx context.Context) error {
		once.Do(func() { setupErr = setupEmulator(ctx, addr) })
		if setupErr != nil {
			return fmt.Errorf("setting up the Spanner emulator at %s: %w", addr, setupErr)
		}
		return nil
	}
	store := func(ctx context.Context) (*batonspanner.Store, error) {
		if err := setup(ctx); err != nil {
			return nil, err
		}
		sc, err := CountedSpannerClient(ctx, benchSpannerDB, &calls)
		if err != nil {
			return nil, err
		}
		s, err := batonspanner.New(sc, nil)
		if err != nil {
			sc.Close()
			return nil, err
		}
		return s, nil
	}
	return Target{
		Name: "baton-spanner (emulator)",
		New: func(ctx context.Context) (Locker, error) {
			s, err := store(ctx)
			if err != nil {
				return nil, err
			}
			return newBatonLocker(func(o *baton.Options) (*baton.Client, error) { return baton.New(s, o) })
		},
		NewElector: func(ctx context.Context, name string, lease time.Duration) (Elector, error) {
			s, err := store(ctx)
			if err != nil {
				return nil, err
			}
			return batonElector(ctx, s, name, lease)
		},
		Calls: calls.Load,
	}
}

// setupEmulator points the Spanner client at the emulator and creates the
// bench's database and lock table there.
func setupEmulator(ctx context.Context, addr string) error {
	if err := os.Setenv("SPANNER_EMULATOR_HOST", addr); err != nil {
		return err
	}
	return batonspanner.CreateTable(ctx, benchSpannerDB, nil)
}

// CountedSpannerClient is a Spanner client of db whose RPCs add to calls.
func CountedSpannerClient(ctx context.Context, db string, calls *atomic.Int64) (*spanner.Client, error) {
	return spanner.NewClient(ctx, db,
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				calls.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				calls.Add(1)
				return streamer(ctx, desc, cc, method, opts...)
			})))
}
