// Command faultcheck runs baton's fault harness against one store and
// writes a report:
//
//	faultcheck run -store postgres18 -duration 10m -report faultcheck/reports/postgres18.md
//
// It starts the store's own server instance through scripts/servers
// (BATON_SERVERS, or -servers) in /tmp/baton-faults, on a port apart from
// the shared test servers (-dir and -port choose others, so that two runs
// of one store can go at once), and client processes that are this same
// executable in worker mode. -store names a server of scripts/servers,
// which names its version (postgres15, postgres18, mysql8…), or sqlite;
// -store list lists them. It exits 1 if the run found a violation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/baton-go/baton/faultcheck"
)

func main() {
	if faultcheck.IsWorker() {
		os.Exit(faultcheck.RunWorker())
	}
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: faultcheck run -store NAME [-duration D] [-report FILE] [-workers N] [-ttl D] [-seed N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	store := fs.String("store", "", "the store's server to run (list: the choices)")
	duration := fs.Duration("duration", 10*time.Minute, "how long to inject faults")
	report := fs.String("report", "", "write a markdown report to this file")
	workers := fs.Int("workers", 6, "client processes")
	ttl := fs.Duration("ttl", 3*time.Second, "lease TTL (session timeout for etcd and ZooKeeper)")
	seed := fs.Uint64("seed", 0, "random seed (0: random)")
	script := fs.String("servers", os.Getenv("BATON_SERVERS"), "path of scripts/servers")
	dir := fs.String("dir", faultcheck.DefaultDir, "directory of the harness's own servers")
	port := fs.Int("port", 0, "port of the harness's own server (default: the store's, see faultcheck.Stores)")
	fs.Parse(os.Args[2:])
	var names []string
	for _, s := range faultcheck.Stores {
		names = append(names, s.Name)
	}
	if *store == "list" {
		fmt.Println(strings.Join(names, "\n"))
		return
	}
	s, ok := faultcheck.StoreNamed(*store)
	if !ok {
		fmt.Fprintf(os.Stderr, "faultcheck: unknown store %q (one of: %s)\n", *store, strings.Join(names, ", "))
		os.Exit(2)
	}
	if *port != 0 {
		s.Port = *port
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := faultcheck.Run(ctx, faultcheck.Config{
		Store: s, Duration: *duration, Workers: *workers, TTL: *ttl, Seed: *seed,
		Servers: *script, Dir: *dir, Log: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultcheck:", err)
		os.Exit(1)
	}
	fmt.Print(faultcheck.Table([]*faultcheck.Result{res}))
	for _, v := range res.Violations {
		fmt.Println("violation:", v)
	}
	for _, e := range res.Errors {
		fmt.Println("error:", e)
	}
	if *report != "" {
		cmd := "faultcheck " + strings.Join(os.Args[1:], " ")
		if err := os.WriteFile(*report, []byte(res.Markdown(cmd)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "faultcheck:", err)
			os.Exit(1)
		}
	}
	if !res.OK() {
		os.Exit(1)
	}
}
