package postgres

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaVersion is stored as the comment of the counters table. Open
// compares it to decide whether the functions must be (re)created; bump it
// whenever ddlTemplate changes.
const schemaVersion = "baton postgres store, schema 2"

var (
	tableRE  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)
	schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

func checkTable(table string) error {
	if !tableRE.MatchString(table) {
		return fmt.Errorf("postgres: invalid table name %q: want a lower-case letter or underscore, then up to 40 lower-case letters, digits or underscores", table)
	}
	return nil
}

func checkSchema(schema string) error {
	if schema != "" && !schemaRE.MatchString(schema) {
		return fmt.Errorf("postgres: invalid schema name %q: want a lower-case letter or underscore, then up to 62 lower-case letters, digits or underscores", schema)
	}
	return nil
}

// objects are the names of the database objects of one lock table, quoted
// and, when a schema is known, qualified with it.
type objects struct {
	table   string // bare table name, also the NOTIFY channel
	schema  string // "" when the objects are left to the search_path
	counter string // the counters table (named Options.Table)
	holds   string // holders and queue entries
	ownerIx string // index on holds (owner), unqualified (indexes live with their table)

	// the functions
	acquire, renew, release, list, purge, wake, bind string
}

func newObjects(schema, table string) objects {
	q := func(suffix string) string {
		if schema == "" {
			return pgx.Identifier{table + suffix}.Sanitize()
		}
		return pgx.Identifier{schema, table + suffix}.Sanitize()
	}
	return objects{
		table:   table,
		schema:  schema,
		counter: q(""),
		holds:   q("_holds"),
		ownerIx: pgx.Identifier{table + "_holds_owner"}.Sanitize(),
		acquire: q("_acquire"),
		renew:   q("_renew"),
		release: q("_release"),
		list:    q("_list"),
		purge:   q("_purge"),
		wake:    q("_wake"),
		bind:    q("_bind"),
	}
}

// DDL returns the SQL script that creates the lock table called table (in
// schema, or in the first schema of the search_path if schema is empty):
// two tables, an index and the functions every call of a Store goes
// through. It is idempotent (CREATE … IF NOT EXISTS, CREATE OR REPLACE).
// Run it yourself, as a role allowed to create objects, when the store's
// own role may not (Options.NoCreate); the store's role then needs SELECT,
// INSERT, UPDATE and DELETE on the two tables and EXECUTE on the functions
// (the default for functions).
func DDL(schema, table string) (string, error) {
	if err := checkTable(table); err != nil {
		return "", err
	}
	if err := checkSchema(schema); err != nil {
		return "", err
	}
	return newObjects(schema, table).ddl(), nil
}

func (o objects) ddl() string {
	return strings.NewReplacer(
		"{COUNTERS}", o.counter,
		"{HOLDS}", o.holds,
		"{OWNER_IX}", o.ownerIx,
		"{ACQUIRE}", o.acquire,
		"{RENEW}", o.renew,
		"{RELEASE}", o.release,
		"{LIST}", o.list,
		"{PURGE}", o.purge,
		"{WAKE}", o.wake,
		"{BIND}", o.bind,
		"{CHANNEL}", "'"+o.table+"'", // validated: [a-z0-9_] only
		"{VERSION}", "'"+schemaVersion+"'",
	).Replace(ddlTemplate)
}

// The SQL of the store. Every entry point (acquire, renew, release, purge,
// list, bind) is one statement from the client, hence one round trip and
// one transaction; inside it, every change to a name happens while the
// transaction holds that name's counters row FOR UPDATE, so the row lock
// serializes everything done to one name. Functions that lock several
// names lock them in name order (COLLATE "C"), so they cannot deadlock one
// another.
//
// The clock is clock_timestamp(), read after the row lock is taken, rather
// than now() (the transaction's start): both are no earlier than the
// moment the client sent its request, so an expiry of clock + TTL is never
// earlier than send time + TTL, which is what the holder's own deadline
// assumes; and clock_timestamp() read under the lock also increases in the
// order in which the decisions on a name are made, so a later decision
// never judges with an older time than an earlier one (now() would, for a
// transaction that waited for the lock), and a holder that waited for the
// lock is not given an expiry already partly spent.
//
// Durability: grants, extensions and renewals commit with
// synchronous_commit on (raised from off if the session had it off), so a
// fencing token or an expiry that a client was told about survives a
// crash. Calls that change nothing a client relies on commit with
// synchronous_commit off: a refused acquire (it only locked a row, maybe
// queued the request or dropped expired entries), a release, a purge. A
// crash can lose such a commit only if no later synchronous commit
// followed it (WAL is flushed in order); a lost release makes the hold
// reappear until its expiry, which delays the next grant but never lets two
// holders overlap, and a lost queue entry only loses its place in the
// queue. The fencing counter is only ever changed by synchronous commits.
const ddlTemplate = `
CREATE TABLE IF NOT EXISTS {COUNTERS} (
	name   text COLLATE "C" PRIMARY KEY,
	seq    bigint NOT NULL DEFAULT 0, -- last fencing token handed out
	ticket bigint NOT NULL DEFAULT 0  -- last queue ticket handed out
) WITH (fillfactor = 75);

CREATE TABLE IF NOT EXISTS {HOLDS} (
	name    text COLLATE "C" NOT NULL,
	owner   text COLLATE "C" NOT NULL,
	queued  boolean NOT NULL,     -- a queue entry, not a hold
	mode    smallint NOT NULL,    -- 1 exclusive, 2 shared
	lim     integer NOT NULL,     -- semaphore limit, 0 for none
	token   bigint NOT NULL,      -- fencing token, or queue ticket
	host    text NOT NULL,
	meta    jsonb,
	ttl_ns  bigint NOT NULL,
	created timestamptz NOT NULL,
	renewed timestamptz NOT NULL,
	expires timestamptz NOT NULL,
	PRIMARY KEY (name, owner)
) WITH (fillfactor = 80);

CREATE INDEX IF NOT EXISTS {OWNER_IX} ON {HOLDS} (owner);

-- wake notifies, at commit, the queued requests of p_name that the grant
-- rules would now grant (the caller has dropped expired entries): the
-- payload is the name, then one owner per line; the name alone wakes every
-- waiter of the name.
CREATE OR REPLACE FUNCTION {WAKE}(p_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	v_holders integer; -- counted once a queue entry is found
	v_excl    boolean;
	v_lim     integer; -- the shared holders' limit, or the queue's so far
	v_ahead   integer := 0;
	v_payload text := p_name;
	v_n       integer := 0;
	q         record;
BEGIN
	FOR q IN SELECT e.owner, e.mode, e.lim FROM {HOLDS} e
	          WHERE e.name = p_name AND e.queued ORDER BY e.token LOOP
		IF v_holders IS NULL THEN
			SELECT count(*), coalesce(bool_or(e.mode = 1), false), min(e.lim) FILTER (WHERE e.mode = 2)
			  INTO v_holders, v_excl, v_lim
			  FROM {HOLDS} e WHERE e.name = p_name AND NOT e.queued;
		END IF;
		IF q.mode = 1 THEN
			IF v_holders = 0 AND v_ahead = 0 THEN
				v_payload := v_payload || E'\n' || q.owner;
				v_n := v_n + 1;
			END IF;
			EXIT; -- nobody behind an exclusive request can be granted
		END IF;
		EXIT WHEN v_excl;
		-- A request for another limit than the holders' or the queue's
		-- ahead is not granted, and keeps those behind it out.
		EXIT WHEN v_lim IS NOT NULL AND q.lim <> v_lim;
		v_lim := q.lim;
		EXIT WHEN q.lim > 0 AND v_holders + v_ahead >= q.lim;
		v_payload := v_payload || E'\n' || q.owner;
		v_n := v_n + 1;
		IF octet_length(v_payload) > 7000 THEN -- NOTIFY payloads stop at 8000 bytes
			v_payload := p_name;
			EXIT;
		END IF;
		v_ahead := v_ahead + 1;
	END LOOP;
	IF v_n > 0 THEN
		PERFORM pg_notify({CHANNEL}, v_payload);
	END IF;
END $$;

-- acquire applies the grant rules of package lockstate to one request.
-- o_status: 0 granted, 1 extended (the owner held it already), 2 not
-- granted (o_after: nanoseconds until the first holder expires, 0 if none),
-- 3 the owner holds the name in another mode or with another limit, 4 a
-- shared request whose limit is not the shared holders'.
-- TTLs arrive in nanoseconds; expiries round them up to microseconds,
-- PostgreSQL's resolution, so that an expiry is never earlier than the
-- time read + TTL.
CREATE OR REPLACE FUNCTION {ACQUIRE}(
	p_name text, p_owner text, p_mode smallint, p_limit integer, p_ttl bigint,
	p_queue boolean, p_qttl bigint, p_host text, p_meta jsonb,
	OUT o_status smallint, OUT o_token bigint, OUT o_created timestamptz,
	OUT o_renewed timestamptz, OUT o_expires timestamptz, OUT o_after bigint)
LANGUAGE plpgsql AS $$
DECLARE
	v_now        timestamptz;
	v_gone       integer;
	v_found      boolean;
	v_queued     boolean;
	v_mode       smallint;
	v_lim        integer;
	v_ticket     bigint;
	v_qexpires   timestamptz;
	v_holders    integer;
	v_excl       boolean;
	v_ahead      integer;
	v_excl_ahead boolean;
	v_first      timestamptz;
	v_ok         boolean;
	v_conflict   boolean;
BEGIN
	PERFORM 1 FROM {COUNTERS} k WHERE k.name = p_name FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO {COUNTERS} (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
		PERFORM 1 FROM {COUNTERS} k WHERE k.name = p_name FOR UPDATE;
	END IF;
	v_now := clock_timestamp();
	o_token := 0; o_created := v_now; o_renewed := v_now; o_expires := v_now; o_after := 0;

	-- In one statement: the caller's live entry, if any, and what the rules
	-- need to know about the other live entries (expired ones are dropped
	-- just below, which changes none of this).
	SELECT o.queued, o.mode, o.lim, o.token, o.expires,
	       a.n_expired, a.n_holders, a.x_holders, a.n_ahead, a.x_ahead, a.first_expiry, a.lim_conflict
	  INTO v_queued, v_mode, v_lim, v_ticket, v_qexpires,
	       v_gone, v_holders, v_excl, v_ahead, v_excl_ahead, v_first, v_conflict
	  FROM (SELECT) AS one
	  LEFT JOIN {HOLDS} o ON o.name = p_name AND o.owner = p_owner AND o.expires > v_now
	 CROSS JOIN LATERAL (
		SELECT count(*) FILTER (WHERE e.expires <= v_now) AS n_expired,
		       count(*) FILTER (WHERE e.expires > v_now AND NOT e.queued) AS n_holders,
		       coalesce(bool_or(e.mode = 1) FILTER (WHERE e.expires > v_now AND NOT e.queued), false) AS x_holders,
		       -- queued ahead: all live queue entries if the caller is not
		       -- queued, else those with a smaller ticket
		       count(*) FILTER (WHERE e.expires > v_now AND e.queued
		                          AND (o.token IS NULL OR e.token < o.token)) AS n_ahead,
		       -- an exclusive request, or one for another limit, queued ahead
		       coalesce(bool_or(e.mode = 1 OR e.lim <> p_limit) FILTER (WHERE e.expires > v_now AND e.queued
		                          AND (o.token IS NULL OR e.token < o.token)), false) AS x_ahead,
		       min(e.expires) FILTER (WHERE e.expires > v_now AND NOT e.queued) AS first_expiry,
		       -- a shared holder that took the name with another limit
		       coalesce(bool_or(e.mode = 2 AND e.lim <> p_limit) FILTER (WHERE e.expires > v_now AND NOT e.queued), false) AS lim_conflict
		  FROM {HOLDS} e WHERE e.name = p_name) AS a;
	v_found := v_queued IS NOT NULL;
	IF v_gone > 0 THEN
		DELETE FROM {HOLDS} e WHERE e.name = p_name AND e.expires <= v_now;
	END IF;

	IF v_found AND NOT v_queued THEN
		IF v_mode <> p_mode OR v_lim <> p_limit THEN
			o_status := 3;
			PERFORM set_config('synchronous_commit', 'off', true);
		ELSE
			UPDATE {HOLDS} e
			   SET ttl_ns = p_ttl, renewed = v_now, host = p_host, meta = p_meta,
			       expires = v_now + ((p_ttl + 999) / 1000) * interval '1 microsecond'
			 WHERE e.name = p_name AND e.owner = p_owner
			RETURNING e.token, e.created, e.renewed, e.expires
			     INTO o_token, o_created, o_renewed, o_expires;
			o_status := 1;
			IF current_setting('synchronous_commit') = 'off' THEN
				PERFORM set_config('synchronous_commit', 'on', true);
			END IF;
		END IF;
		IF v_gone > 0 THEN
			PERFORM {WAKE}(p_name);
		END IF;
		RETURN;
	END IF;
	IF p_mode = 2 AND v_conflict THEN
		o_status := 4;
		PERFORM set_config('synchronous_commit', 'off', true);
		IF v_gone > 0 THEN
			PERFORM {WAKE}(p_name);
		END IF;
		RETURN;
	END IF;
	IF p_mode = 1 THEN
		v_ok := v_holders = 0 AND v_ahead = 0;
	ELSE
		v_ok := NOT v_excl AND NOT v_excl_ahead AND (p_limit = 0 OR v_holders + v_ahead < p_limit);
	END IF;

	IF v_ok THEN
		UPDATE {COUNTERS} k SET seq = k.seq + 1 WHERE k.name = p_name RETURNING k.seq INTO o_token;
		o_expires := v_now + ((p_ttl + 999) / 1000) * interval '1 microsecond';
		IF v_found THEN -- leaves the queue
			UPDATE {HOLDS} e
			   SET queued = false, mode = p_mode, lim = p_limit, token = o_token, host = p_host,
			       meta = p_meta, ttl_ns = p_ttl, created = v_now, renewed = v_now, expires = o_expires
			 WHERE e.name = p_name AND e.owner = p_owner;
		ELSE
			INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires)
			VALUES (p_name, p_owner, false, p_mode, p_limit, o_token, p_host, p_meta, p_ttl, v_now, v_now, o_expires);
		END IF;
		o_status := 0;
		IF current_setting('synchronous_commit') = 'off' THEN
			PERFORM set_config('synchronous_commit', 'on', true);
		END IF;
		IF v_gone > 0 THEN
			PERFORM {WAKE}(p_name);
		END IF;
		RETURN;
	END IF;

	IF p_queue THEN
		IF v_found THEN
			-- Refresh only when half the entry's time is used, so that a
			-- waiter that polls often does not write each time.
			IF v_qexpires - v_now < ((p_qttl / 2 + 999) / 1000) * interval '1 microsecond' THEN
				UPDATE {HOLDS} e
				   SET renewed = v_now, expires = v_now + ((p_qttl + 999) / 1000) * interval '1 microsecond'
				 WHERE e.name = p_name AND e.owner = p_owner;
			END IF;
		ELSE
			UPDATE {COUNTERS} k SET ticket = k.ticket + 1 WHERE k.name = p_name RETURNING k.ticket INTO v_ticket;
			INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires)
			VALUES (p_name, p_owner, true, p_mode, p_limit, v_ticket, p_host, p_meta, p_qttl, v_now, v_now,
			        v_now + ((p_qttl + 999) / 1000) * interval '1 microsecond');
		END IF;
	END IF;
	o_status := 2;
	IF v_first IS NOT NULL THEN
		o_after := (extract(epoch FROM v_first - v_now) * 1000000000)::bigint;
	END IF;
	PERFORM set_config('synchronous_commit', 'off', true);
	IF v_gone > 0 THEN
		PERFORM {WAKE}(p_name);
	END IF;
END $$;

-- renew extends the live holds among (p_names[i], p_owners[i]) by
-- p_ttls[i] nanoseconds and returns one row per hold renewed. Holds that
-- are not live are skipped without locking their name.
CREATE OR REPLACE FUNCTION {RENEW}(p_names text[], p_owners text[], p_ttls bigint[])
RETURNS TABLE (o_i integer, o_token bigint, o_created timestamptz, o_renewed timestamptz, o_expires timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	r      record;
	v_now  timestamptz;
	v_gone integer;
	v_sync boolean := false;
BEGIN
	FOR r IN
		SELECT u.name, u.owner, u.ttl, u.i::integer AS i
		  FROM unnest(p_names, p_owners, p_ttls) WITH ORDINALITY AS u(name, owner, ttl, i)
		 WHERE EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = u.name AND e.owner = u.owner
		                  AND NOT e.queued AND e.expires > clock_timestamp())
		 ORDER BY u.name COLLATE "C", u.i
	LOOP
		PERFORM 1 FROM {COUNTERS} k WHERE k.name = r.name FOR UPDATE;
		v_now := clock_timestamp();
		DELETE FROM {HOLDS} e WHERE e.name = r.name AND e.expires <= v_now;
		GET DIAGNOSTICS v_gone = ROW_COUNT;
		UPDATE {HOLDS} e
		   SET ttl_ns = r.ttl, renewed = v_now, expires = v_now + ((r.ttl + 999) / 1000) * interval '1 microsecond'
		 WHERE e.name = r.name AND e.owner = r.owner AND NOT e.queued
		RETURNING r.i, e.token, e.created, e.renewed, e.expires
		     INTO o_i, o_token, o_created, o_renewed, o_expires;
		IF FOUND THEN
			IF NOT v_sync AND current_setting('synchronous_commit') = 'off' THEN
				PERFORM set_config('synchronous_commit', 'on', true);
			END IF;
			v_sync := true;
			RETURN NEXT;
		END IF;
		IF v_gone > 0 THEN -- expired holders dropped: waiters may go
			PERFORM {WAKE}(r.name);
		END IF;
	END LOOP;
END $$;

-- release removes the holds and queue entries (p_names[i], p_owners[i])
-- and returns, for each live one, whether it was a hold. Keys without a
-- live entry are skipped without locking their name.
CREATE OR REPLACE FUNCTION {RELEASE}(p_names text[], p_owners text[])
RETURNS TABLE (o_i integer, o_held boolean)
LANGUAGE plpgsql AS $$
DECLARE
	r      record;
	v_now  timestamptz;
	v_gone integer;
	v_held boolean;
BEGIN
	-- Asynchronous commit: a release lost in a crash only brings the hold
	-- back until it expires; the next grant, synchronous, flushes it anyway.
	PERFORM set_config('synchronous_commit', 'off', true);
	FOR r IN
		SELECT u.name, u.owner, u.i::integer AS i
		  FROM unnest(p_names, p_owners) WITH ORDINALITY AS u(name, owner, i)
		 WHERE EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = u.name AND e.owner = u.owner AND e.expires > clock_timestamp())
		 ORDER BY u.name COLLATE "C", u.i
	LOOP
		PERFORM 1 FROM {COUNTERS} k WHERE k.name = r.name FOR UPDATE;
		v_now := clock_timestamp();
		-- The key's entry, and the name's expired ones.
		WITH d AS (
			DELETE FROM {HOLDS} e
			 WHERE e.name = r.name AND (e.owner = r.owner OR e.expires <= v_now)
			RETURNING e.owner, e.queued, e.expires
		)
		SELECT count(*), coalesce(bool_or(d.owner = r.owner AND d.expires > v_now AND NOT d.queued), false)
		  INTO v_gone, v_held
		  FROM d;
		IF v_gone > 0 THEN
			PERFORM {WAKE}(r.name);
		END IF;
		o_i := r.i;
		o_held := v_held;
		RETURN NEXT;
	END LOOP;
END $$;

-- purge deletes the expired holds and queue entries of every name and
-- returns the holds.
CREATE OR REPLACE FUNCTION {PURGE}()
RETURNS TABLE (o_name text, o_owner text, o_mode smallint, o_lim integer, o_token bigint,
               o_host text, o_meta jsonb, o_ttl bigint, o_created timestamptz,
               o_renewed timestamptz, o_expires timestamptz, o_now timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	r     record;
	v_now timestamptz;
BEGIN
	PERFORM set_config('synchronous_commit', 'off', true); -- only expired entries go
	FOR r IN SELECT DISTINCT e.name FROM {HOLDS} e WHERE e.expires <= clock_timestamp() ORDER BY e.name LOOP
		PERFORM 1 FROM {COUNTERS} k WHERE k.name = r.name FOR UPDATE;
		v_now := clock_timestamp();
		RETURN QUERY
			WITH d AS (DELETE FROM {HOLDS} e WHERE e.name = r.name AND e.expires <= v_now RETURNING e.*)
			SELECT d.name, d.owner, d.mode, d.lim, d.token, d.host, d.meta, d.ttl_ns,
			       d.created, d.renewed, d.expires, v_now
			  FROM d WHERE NOT d.queued;
		PERFORM {WAKE}(r.name);
	END LOOP;
END $$;

-- list returns the holds and queue entries matching a name (or ''), a
-- prefix (or '') and an owner (or ''), expired ones included, with the
-- store's time.
CREATE OR REPLACE FUNCTION {LIST}(p_name text, p_prefix text, p_owner text)
RETURNS TABLE (o_name text, o_owner text, o_queued boolean, o_mode smallint, o_lim integer,
               o_token bigint, o_host text, o_meta jsonb, o_ttl bigint, o_created timestamptz,
               o_renewed timestamptz, o_expires timestamptz, o_now timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	v_now timestamptz := clock_timestamp();
BEGIN
	IF p_name <> '' THEN
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed, e.expires, v_now
		  FROM {HOLDS} e
		 WHERE e.name = p_name AND starts_with(e.name, p_prefix) AND (p_owner = '' OR e.owner = p_owner);
	ELSIF p_owner <> '' THEN
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed, e.expires, v_now
		  FROM {HOLDS} e
		 WHERE e.owner = p_owner AND starts_with(e.name, p_prefix);
	ELSIF p_prefix <> '' THEN
		-- The range lets the primary key's index (COLLATE "C": byte order) find the prefix.
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed, e.expires, v_now
		  FROM {HOLDS} e
		 WHERE e.name >= p_prefix AND e.name < p_prefix || chr(1114111) AND starts_with(e.name, p_prefix);
	ELSE
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed, e.expires, v_now
		  FROM {HOLDS} e;
	END IF;
END $$;

-- bind, inside the transaction of Store.InLockedTx, takes the name's
-- counters row FOR UPDATE (holding it until that transaction ends, so that
-- nothing is granted on the name meanwhile) and drops the hold through
-- which the transaction waited its turn and got its token, if that hold is
-- still live. It wakes, at commit, the requests queued next.
CREATE OR REPLACE FUNCTION {BIND}(p_name text, p_owner text, p_token bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	v_ok boolean;
BEGIN
	PERFORM 1 FROM {COUNTERS} k WHERE k.name = p_name FOR UPDATE;
	DELETE FROM {HOLDS} e
	 WHERE e.name = p_name AND e.owner = p_owner AND NOT e.queued
	   AND e.token = p_token AND e.expires > clock_timestamp();
	v_ok := FOUND;
	IF v_ok THEN
		PERFORM {WAKE}(p_name);
	END IF;
	RETURN v_ok;
END $$;

COMMENT ON TABLE {COUNTERS} IS {VERSION};
`
