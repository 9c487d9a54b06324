package main

import (
	"fmt"
	"strings"
)

const storeHelp = `Store:
  --store URL, else $BATON_STORE, else an SQLite file that needs no setup
  and is shared by the processes of this machine:
    $XDG_STATE_HOME/baton/baton.db, else ~/.local/state/baton/baton.db
    (macOS: ~/Library/Application Support/baton/baton.db;
     Windows: %AppData%\baton\baton.db)
  Its directory is created when needed. Other stores, in a baton built
  with their tags (go install -tags all, or -tags postgres,redis, ...):
    sqlite:///abs/path/locks.db                an SQLite file of your choice
    postgres://user:pass@host:5432/db          PostgreSQL
    mysql://user:pass@host:3306/db             MySQL / MariaDB (also mariadb://)
    redis://host:6379/0, rediss://…            Redis (one server; clusters through the Go API)
    etcd://host1:2379,host2:2379/prefix        etcd (etcds:// for TLS)
    zk://host1:2181,host2:2181/chroot          ZooKeeper
    mongodb://host:27017/db?collection=locks   MongoDB (also mongodb+srv://)
    opensearch://host:9200/index               OpenSearch / Elasticsearch
                                               (elasticsearch://, …+https://)
    spanner://projects/P/instances/I/databases/D   Cloud Spanner
    nats://host:4222/bucket                    NATS JetStream key-value (nats+tls://)
  Each store's package documentation lists its URL options.
`

const exitHelp = `Exit codes:
  0    success (run: the command succeeded)
  1    error (the store could not be reached, ...)
  2    usage error (bad flags or arguments, a malformed or unknown --store)
  3    lock not acquired: held, with --wait=false, or --timeout reached
       (run's -E chooses another code)
  4    lease lost while the command ran: the command was stopped
  126  the command could not be started (permission denied, ...)
  127  the command was not found
  else run exits with the command's code (128+N if signal N killed it)
`

func mainHelp() string {
	var b strings.Builder
	b.WriteString(`baton runs commands under distributed locks, and shows and manages the locks.

Usage:
  baton COMMAND [ARGS...] [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString(`
Examples:
  baton run nightly -- ./job.sh          run job.sh unless another copy runs
  baton run db-migrate --wait=false -- make migrate
  baton run uploads -n 4 -- ./upload.sh  at most 4 uploads at once
  baton status                           who holds what
  baton status --json nightly

`)
	b.WriteString(storeHelp)
	b.WriteString("\n")
	b.WriteString(exitHelp)
	b.WriteString(`
Run 'baton help COMMAND' or 'baton COMMAND --help' for a command's flags.
`)
	return b.String()
}

const runHelp = runHelpBody + storeHelp + "\n" + exitHelp

const runHelpBody = `Usage: baton run NAME [flags] -- CMD [ARGS...]

Take the lock NAME (exclusive by default), run CMD while holding it, and
release the lock when CMD exits. baton renews the lease every TTL/3 while
CMD runs. Flags may come before or after NAME; everything after -- is the
command.

Flags:
  --shared       take a shared lock: many shared holders at once, never
                 together with an exclusive one
  -n N           take one of N slots of a semaphore (a shared lock with at
                 most N holders; N >= 1); while others hold NAME with one N,
                 a request with another N, or --shared, is refused (exit 1)
  --ttl D        lease length (default 15s): if baton dies or loses the
                 store, others get the lock at most D later
  --min-hold D   keep NAME held at least D after the grant, even if CMD
                 exits sooner: a job run by cron on many machines runs once
                 per period if their clocks differ by less than D. The hold
                 stays in the store after baton exits (etcd, ZooKeeper:
                 baton waits until D has passed, then releases)
  --lock-delay D if the lease is lost (baton cut off from the store, or
                 killed), grant NAME to nobody for D after its TTL ran out:
                 with D at least --grace, the command has been stopped
                 before anyone else gets NAME. Not on etcd or ZooKeeper
  --wait         wait for the lock (default true); --wait=false tries once
                 and exits with code 3 if the lock is held
  --timeout D    wait at most D for the lock (connecting to the store
                 included), then exit with code 3 (default 0: forever;
                 connecting alone gives up after 10s)
  -E, --conflict-exit-code N
                 exit with N instead of 3 when the lock is not acquired
  --owner ID     owner id (default: a new random one). Keep it unguessable;
                 'baton release NAME --owner ID' releases it. Two runs with
                 the same owner share one hold: do not start them at once.
  --grace D      time between SIGTERM and SIGKILL when the command must stop
                 (default 10s)
  --on-ask SIG   when someone asks for the lock ('baton release NAME --ask'),
                 send the command SIG: TERM (the default), INT, QUIT or KILL
                 stop it (SIGKILL after --grace), HUP, USR1 or USR2 only
                 tell it; none ignores asks. The lock is released when the
                 command exits, as always
  -v, --verbose  say what baton waits for (who holds the lock, since when,
                 its token and time left, again when that changes) and
                 what happens to the lease; pass on the store driver's log
                 lines. On a terminal, baton says once, after a second of
                 waiting, who holds the lock, even without --verbose.
  --store URL    the store (see below)

Durations (D) are Go durations (90s, 1m30s, 500ms) or plain seconds (90,
0.5).

The command gets these environment variables:
  BATON_NAME     the lock's name
  BATON_TOKEN    the fencing token (decimal): larger than the token of every
                 earlier grant of NAME; pass it to what the lock protects,
                 which can refuse writes with a token smaller than one seen
                 (over HTTP, as the Fencing-Token header: Go package
                 github.com/baton-go/baton/fence checks it)
  BATON_OWNER    the owner id
  BATON_TTL      the lease length (a Go duration, e.g. 15s)
  BATON_MODE     exclusive or shared
  BATON_STORE    the store's URL, without passwords

If the lease is lost while the command runs (it could not be renewed in
time, or an administrator released it), baton sends the command SIGTERM,
then SIGKILL after --grace, and exits with code 4. Keep --grace short next
to --ttl, set --lock-delay to at least --grace, or make the command check
the fencing token: another holder may get the lock once the lease ended.

The command never outlives baton. Unless baton runs in a terminal's
foreground, the command runs in a process group of its own, under a small
guard process (baton itself): baton's signals reach the whole group, and
if baton dies, even of SIGKILL, the guard kills the whole group at once,
long before anyone else can be granted the lock. In a terminal's
foreground the command stays in baton's process group, so that it reads
the terminal and gets ^C and ^Z: there, if baton is killed, Linux kills
the command (not the processes it started); other systems do not. On
Windows the command is not stopped if baton is killed.

On SIGINT, SIGTERM, SIGHUP or SIGQUIT, baton passes the signal on to the
command (a terminal's ^C reaches both directly), waits for it to exit
(SIGKILL after --grace), releases the lock and exits with the command's
code. A signal while waiting for the lock stops the wait (exit 128+N).

Examples:
  baton run nightly -- ./job.sh
  baton run nightly --wait=false -- ./job.sh   # skip if already running
  baton run hourly --wait=false --min-hold 5m -- ./job.sh   # from cron on every replica: once an hour
  baton run deploy --timeout 5m -- make deploy
  baton run backups -n 2 --ttl 1m -- ./backup.sh /srv
  baton run --shared config -- ./read-config.sh
  baton run nightly -- sh -c 'echo "token $BATON_TOKEN"'
  baton run nightly -- sh -c 'curl -fsS -X PUT -H "Fencing-Token: $BATON_TOKEN" \
      --data-binary @report.csv https://reports.internal/nightly'

`

const statusHelp = statusHelpBody + storeHelp

const statusHelpBody = `Usage: baton status [PREFIX] [flags]

List the locks held (whose names start with PREFIX, if given): one row per
holder, sorted by name.

Flags:
  --json         print a JSON array of objects with the keys name, owner,
                 mode, limit, token, host, meta, ttl_ms, created, renewed,
                 expires, left_ms and queued (times in RFC 3339, UTC)
  --all          also list waiters queued for a lock and holds that expired
                 but were not purged
  --timeout D    give up after D (default 10s)
  --store URL    the store (see below)

Columns: NAME, MODE (exclusive, shared, or shared/N for a semaphore of N),
OWNER, TOKEN (the fencing token; "(queued)" for waiters), HOST, LEFT (time
left before the hold expires unless renewed), AGE (time since the grant).

Examples:
  baton status
  baton status backup- --all
  baton status --json | jq -r '.[] | select(.left_ms < 5000) | .name'

`

const releaseHelp = releaseHelpBody + storeHelp

const releaseHelpBody = `Usage: baton release NAME --owner ID [flags]
       baton release NAME --ask [--reason TEXT] [--wait D] [flags]

With --owner, release the hold of lock NAME by owner ID (see 'baton
status'), for a lock whose holder is stuck. The holder is not told: it
finds out at its next renewal (within a third of its TTL) and may act as
the holder until then; a baton run holder then stops its command and
exits with code 4. Exits 0 if the hold was released, 1 if that owner held
nothing.

With --ask, ask NAME's holders to release it, and wait until they did.
Nothing is forced: holders that follow asks are told at once (within the
store's poll interval where the store cannot notify): a 'baton run'
holder signals its command (--on-ask), a Go holder sees Lease.Asked. A
holder that does not follow asks keeps the lock. Exits 0 once the holders
asked have let go (or if nobody held NAME), 1 if one still holds it after
--wait. The ask stands until then.

Flags:
  --owner ID     the owner whose hold to release
  --ask          ask the holders instead
  --reason TEXT  with --ask: the reason the holders are told
  --wait D       with --ask: how long to wait for them (default 1m)
  --timeout D    give up connecting after D (default 10s)
  --store URL    the store (see below)

Examples:
  baton status nightly
  baton release nightly --owner 5TQ3PKQO3BIGQ6ZXJCZXKW6XJA
  baton release nightly --ask --reason "deploy at 10:00"

`

const purgeHelp = purgeHelpBody + storeHelp

const purgeHelpBody = `Usage: baton purge [flags]

Delete the holds and queue entries that expired without being released
(their holders died), and list them. Expired holds never block anyone, so
this only saves space; fencing tokens keep increasing.

Flags:
  --timeout D    give up after D (default 10s)
  --store URL    the store (see below)

Example:
  baton purge

`

const versionHelp = `Usage: baton version

Print baton's version, and the Go version and platform it was built for.
`

const helpHelp = `Usage: baton help [COMMAND]

Show help for baton, or for COMMAND (the same as 'baton COMMAND --help').
`
