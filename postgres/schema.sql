-- The objects of one lock table of baton's PostgreSQL store. The store
-- replaces the {NAMES} (see ddl.go); postgres.DDL returns the result.
--
-- Every entry point (acquire, join, renew, release, release_one, purge,
-- list, bind) is one statement from the client: one round trip, one
-- transaction. Every change to a name happens while the transaction holds
-- that name's row of {COUNTERS} locked, so the row lock serializes
-- everything done to one name; functions that lock several names lock
-- them in name order (COLLATE "C"), so they cannot deadlock one another.
--
-- A name whose only entry is one exclusive hold keeps it in its own row
-- ("inline": the x* columns), and busy says whether the name has entries in
-- {HOLDS}. An uncontended acquire and its release are then one update of
-- one row each (the fast path, which needs not busy); every other case
-- first moves an inline hold to {HOLDS} ({TAKE}), applies the rules of
-- package lockstate there, and leaves busy right ({SETTLE}).
--
-- The clock is clock_timestamp(), read after the row lock is taken, or at
-- the statement's start in single-statement updates: either way no
-- earlier than the moment the client sent its request, so an expiry of
-- clock + TTL is never earlier than send time + TTL, which is what the
-- holder's own deadline assumes.
--
-- The one-row tables {EPOCHS} and {INCARNATION} are always read by their
-- key (WHERE id): the entry points run with enable_seqscan off, under
-- which PostgreSQL 17 and earlier cost a scan high enough to compile the
-- statement with JIT, 30-150 ms a call.
--
-- Durability: lock calls commit asynchronously, without waiting for the
-- disk, except grants and renewals of leases longer than the caller's
-- bound (p_durable, in ns; -1 makes them all durable). A crash of the
-- server may then forget the last grants, renewals and releases, and roll
-- a counter back. Two things make that safe. Tokens carry an epoch in
-- their high 31 bits (token = epoch << 32 | counter), and every new
-- incarnation of the server starts a new epoch, durably: the marker row
-- of the unlogged table {INCARNATION}, which crash recovery empties and a
-- standby or a base backup does not have, is missing. And after a new
-- incarnation nothing is granted for a grace period as long as the longest
-- non-durable lease ever granted ({EPOCHS}.max_ttl, raised durably before
-- such a lease is granted), so that every hold the crash forgot has ended
-- before anyone else gets its name; its holder finds out when its renewal
-- fails. Holds the server remembers are renewed and released as usual
-- meanwhile.
--
-- Sessions: a hold may be bound to a session of its client (xs, sid), a
-- row of the unlogged table {SESSIONS} that the client renews in place of
-- the hold's own renewals. Such a hold lives until the later of its own
-- expiry and its session's. Whatever judges a hold past its own expiry
-- reads its session FOR SHARE ({ALIVE}), under the name's row lock: a
-- renewal of the session, which takes the row's lock, then waits for the
-- judgment to commit, and renews only a session still live by then. take
-- moves the session's expiry onto the name's holds that need it, so the
-- rules that follow judge by expires alone. A name's bound says whether
-- its entries in {HOLDS} may have sessions: set by whatever binds one
-- there, cleared when the name has none left. A crash empties {SESSIONS}
-- with the marker, and the grace period covers the sessions' TTLs as it
-- covers the leases' (sessions are kept only for leases granted without a
-- flush).

CREATE TABLE IF NOT EXISTS {COUNTERS} (
	name   text COLLATE "C" PRIMARY KEY,
	seq    bigint NOT NULL DEFAULT 0, -- counter of the last token, within epoch
	ticket bigint NOT NULL DEFAULT 0  -- last queue ticket handed out
) WITH (fillfactor = 75);
ALTER TABLE {COUNTERS}
	ADD COLUMN IF NOT EXISTS epoch integer NOT NULL DEFAULT 0, -- epoch of seq
	ADD COLUMN IF NOT EXISTS busy  boolean NOT NULL DEFAULT false,
	ADD COLUMN IF NOT EXISTS xo    text COLLATE "C", -- owner of the inline hold, NULL if none
	ADD COLUMN IF NOT EXISTS xt    bigint,
	ADD COLUMN IF NOT EXISTS xh    text,
	ADD COLUMN IF NOT EXISTS xm    jsonb,
	ADD COLUMN IF NOT EXISTS xttl  bigint,
	ADD COLUMN IF NOT EXISTS xc    timestamptz,
	ADD COLUMN IF NOT EXISTS xr    timestamptz,
	ADD COLUMN IF NOT EXISTS xe    timestamptz,
	ADD COLUMN IF NOT EXISTS xs    text COLLATE "C", -- the inline hold's session, NULL if none
	ADD COLUMN IF NOT EXISTS bound boolean NOT NULL DEFAULT false; -- entries in {HOLDS} may have a session

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
-- From schema 4: a queue entry keeps the TTL of the hold it asks for, and
-- its owner's bound on leases granted without a flush (see wake).
ALTER TABLE {HOLDS}
	ADD COLUMN IF NOT EXISTS hold_ttl bigint,
	ADD COLUMN IF NOT EXISTS durable  bigint,
	ADD COLUMN IF NOT EXISTS sid      text COLLATE "C", -- from schema 5: the hold's session, NULL if none
	ADD COLUMN IF NOT EXISTS chan     text COLLATE "C"; -- from schema 6: the channel of a queue entry's Store, NULL for the table's

CREATE INDEX IF NOT EXISTS {OWNER_IX} ON {HOLDS} (owner);

-- From schema 2: names with entries are busy.
UPDATE {COUNTERS} k SET busy = true
 WHERE NOT k.busy AND EXISTS (SELECT 1 FROM {HOLDS} e WHERE e.name = k.name);

-- The current epoch and the longest TTL of a lease granted without a
-- flush. Schema 2's tokens were plain counters: the first epoch is above
-- them all.
CREATE TABLE IF NOT EXISTS {EPOCHS} (
	id        boolean PRIMARY KEY DEFAULT true CHECK (id),
	epoch     integer NOT NULL,
	max_ttl   bigint NOT NULL,
	reclaimed timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO {EPOCHS} (epoch, max_ttl)
SELECT coalesce(max(k.seq >> 32), 0) + 1, 0 FROM {COUNTERS} k
ON CONFLICT (id) DO NOTHING;

-- The marker of this incarnation of the server: missing after a crash,
-- on a promoted standby, in a restored base backup.
CREATE UNLOGGED TABLE IF NOT EXISTS {INCARNATION} (
	id      boolean PRIMARY KEY DEFAULT true CHECK (id),
	epoch   integer NOT NULL,
	max_ttl bigint NOT NULL,
	grace   timestamptz NOT NULL -- nothing is granted before
);

-- The clients' sessions (schema 5), which crash recovery empties too.
CREATE UNLOGGED TABLE IF NOT EXISTS {SESSIONS} (
	id      text COLLATE "C" PRIMARY KEY,
	expires timestamptz NOT NULL
);

-- Functions of earlier schemas whose arguments or results changed, which
-- CREATE OR REPLACE cannot replace (schema 2's know nothing of inline
-- holds: calls of older versions fail instead of misjudging).
DROP FUNCTION IF EXISTS {ACQUIRE}(text, text, smallint, integer, bigint, boolean, bigint, text, jsonb);
DROP FUNCTION IF EXISTS {RENEW}(text[], text[], bigint[]);
DROP FUNCTION IF EXISTS {WAKE}(text);
DROP FUNCTION IF EXISTS {WAKE}(text, boolean);
DROP FUNCTION IF EXISTS {TAKE}(text, integer);
-- Schema 4's acquire, replaced below by one that answers with o_bound as
-- well: schema 4's script, run by an earlier version of this package,
-- then fails on it instead of putting back functions that know nothing
-- of sessions, while the earlier versions already running keep working.
DROP FUNCTION IF EXISTS {ACQUIRE}(text, text, smallint, integer, bigint, boolean, bigint, text, jsonb, bigint);

-- new_epoch starts a new epoch, durably: on a new incarnation (the marker
-- is missing: grace follows), when a name's counter is full, or to
-- reclaim idle names. It returns the marker row. The caller's transaction
-- commits synchronously.
CREATE OR REPLACE FUNCTION {NEWEPOCH}(p_incarnation boolean,
	OUT o_epoch integer, OUT o_max_ttl bigint, OUT o_grace timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM {EPOCHS} e WHERE e.id FOR UPDATE; -- one at a time
	SELECT i.epoch, i.max_ttl, i.grace INTO o_epoch, o_max_ttl, o_grace FROM {INCARNATION} i WHERE i.id;
	IF FOUND AND p_incarnation THEN
		RETURN; -- another session began it
	END IF;
	PERFORM set_config('synchronous_commit', 'on', true);
	UPDATE {EPOCHS} e SET epoch = e.epoch + 1 WHERE e.id RETURNING e.epoch, e.max_ttl INTO o_epoch, o_max_ttl;
	IF o_grace IS NULL THEN -- a new incarnation
		o_grace := clock_timestamp() + ((o_max_ttl + 999) / 1000) * interval '1 microsecond';
	END IF;
	INSERT INTO {INCARNATION} (epoch, max_ttl, grace) VALUES (o_epoch, o_max_ttl, o_grace)
	ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, max_ttl = excluded.max_ttl, grace = excluded.grace;
END $$;

-- raise records, durably, that leases of p_ttl ns may be granted without
-- a flush: the grace period after a crash covers them.
CREATE OR REPLACE FUNCTION {RAISE}(p_ttl bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('synchronous_commit', 'on', true);
	UPDATE {EPOCHS} e SET max_ttl = greatest(e.max_ttl, p_ttl) WHERE e.id;
	UPDATE {INCARNATION} i SET max_ttl = greatest(i.max_ttl, p_ttl) WHERE i.id;
END $$;

-- alive returns the expiry of session p_sid, NULL if it has none, and
-- holds its row FOR SHARE until the transaction ends: a renewal waits, and
-- then renews it only if it is still live.
CREATE OR REPLACE FUNCTION {ALIVE}(p_sid text) RETURNS timestamptz
LANGUAGE sql AS $$
	SELECT s.expires FROM {SESSIONS} s WHERE s.id = p_sid FOR SHARE
$$;

-- session creates session p_id (p_create) or renews it if it is live,
-- for p_ttl ns, and reports whether it did. Sessions are kept only for
-- leases the grace period covers (p_ttl up to p_durable): a crash forgets
-- them, as it forgets those leases' grants.
CREATE OR REPLACE FUNCTION {SESSION}(p_id text, p_ttl bigint, p_create boolean, p_durable bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	v_ttl interval := ((p_ttl + 999) / 1000) * interval '1 microsecond';
BEGIN
	IF NOT p_create THEN
		PERFORM set_config('synchronous_commit', 'off', true);
		-- The row's lock first, then the clock: a judgment that holds the
		-- row FOR SHARE (alive) is waited for, and a session that expired
		-- meanwhile is not renewed. (An UPDATE alone would have judged the
		-- row live before it waited, and renewed it after.)
		PERFORM 1 FROM {SESSIONS} s WHERE s.id = p_id FOR NO KEY UPDATE;
		UPDATE {SESSIONS} s SET expires = clock_timestamp() + v_ttl
		 WHERE s.id = p_id AND s.expires > clock_timestamp();
		RETURN FOUND;
	END IF;
	IF p_durable < 0 OR p_ttl > p_durable THEN
		RETURN false;
	END IF;
	PERFORM {BEGIN}(p_ttl, p_durable); -- raises max_ttl, durably, if need be
	DELETE FROM {SESSIONS} s WHERE s.expires <= clock_timestamp();
	INSERT INTO {SESSIONS} (id, expires) VALUES (p_id, clock_timestamp() + v_ttl) ON CONFLICT (id) DO NOTHING;
	RETURN FOUND;
END $$;

-- begin reads the marker (starting a new incarnation if it is missing)
-- and sets the transaction's durability for leases of up to p_ttl ns. A
-- transaction that started an epoch commits synchronously whatever the
-- lease: were the epoch forgotten, the next one would repeat it.
CREATE OR REPLACE FUNCTION {BEGIN}(p_ttl bigint, p_durable bigint,
	OUT o_epoch integer, OUT o_grace timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	v_max_ttl bigint;
	v_new     boolean := false;
BEGIN
	SELECT i.epoch, i.max_ttl, i.grace INTO o_epoch, v_max_ttl, o_grace FROM {INCARNATION} i WHERE i.id;
	IF NOT FOUND THEN
		SELECT e.o_epoch, e.o_max_ttl, e.o_grace INTO o_epoch, v_max_ttl, o_grace FROM {NEWEPOCH}(true) e;
		v_new := true;
	END IF;
	IF p_durable >= 0 AND p_ttl <= p_durable AND NOT v_new THEN
		PERFORM set_config('synchronous_commit', 'off', true);
		IF p_ttl > v_max_ttl THEN
			PERFORM {RAISE}(p_ttl);
		END IF;
	ELSE
		PERFORM set_config('synchronous_commit', 'on', true);
	END IF;
END $$;

-- take locks p_name's row, creating it, and moves its inline hold, if
-- live, to {HOLDS}; holds of the name past their own expiry whose session
-- is live take the session's expiry. It returns the epoch for the name's next token (a new
-- row takes the current one, read under the lock that reclaim takes before
-- it deletes rows, so that a name reclaimed and used again never reissues
-- a token), and busy as the row had it: when it was set, and the caller
-- deletes no entry, the name still has entries when it is done, and busy
-- needs no settling.
CREATE OR REPLACE FUNCTION {TAKE}(p_name text, INOUT p_epoch integer, OUT o_busy boolean)
LANGUAGE plpgsql AS $$
DECLARE
	r     record;
	v_exp timestamptz;
BEGIN
	SELECT k.busy, k.bound, k.xo, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr, k.xe, k.xs INTO r
	  FROM {COUNTERS} k WHERE k.name = p_name FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM pg_advisory_xact_lock_shared(hashtextextended({KEY}, 0));
		SELECT i.epoch INTO p_epoch FROM {INCARNATION} i WHERE i.id;
		IF NOT FOUND THEN
			SELECT e.o_epoch INTO p_epoch FROM {NEWEPOCH}(true) e;
		END IF;
		INSERT INTO {COUNTERS} (name, epoch) VALUES (p_name, p_epoch) ON CONFLICT (name) DO NOTHING;
		SELECT k.busy, k.bound, k.xo, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr, k.xe, k.xs INTO r
		  FROM {COUNTERS} k WHERE k.name = p_name FOR UPDATE;
	END IF;
	o_busy := r.busy;
	IF r.xo IS NOT NULL THEN
		v_exp := r.xe;
		IF r.xe <= clock_timestamp() AND r.xs IS NOT NULL THEN
			v_exp := greatest(r.xe, {ALIVE}(r.xs));
		END IF;
		IF v_exp > clock_timestamp() THEN
			INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, sid)
			VALUES (p_name, r.xo, false, 1, 0, r.xt, r.xh, r.xm, r.xttl, r.xc, r.xr, v_exp, r.xs);
			UPDATE {COUNTERS} k SET xo = NULL, xm = NULL, xs = NULL, bound = k.bound OR r.xs IS NOT NULL WHERE k.name = p_name;
		ELSE
			UPDATE {COUNTERS} k SET xo = NULL, xm = NULL, xs = NULL WHERE k.name = p_name;
		END IF;
	END IF;
	IF r.busy AND r.bound THEN
		WITH s AS (
			SELECT s.id, s.expires FROM {SESSIONS} s
			 WHERE s.id IN (SELECT e.sid FROM {HOLDS} e
			                 WHERE e.name = p_name AND e.sid IS NOT NULL AND e.expires <= clock_timestamp())
			   FOR SHARE
		)
		UPDATE {HOLDS} e SET expires = s.expires
		  FROM s WHERE e.name = p_name AND e.sid = s.id AND e.expires < s.expires;
	END IF;
END $$;

-- settle sets busy to whether p_name has entries in {HOLDS}, and clears
-- bound if it has none; its row is locked.
CREATE OR REPLACE FUNCTION {SETTLE}(p_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	v_busy boolean := EXISTS (SELECT 1 FROM {HOLDS} e WHERE e.name = p_name);
BEGIN
	UPDATE {COUNTERS} k SET busy = v_busy, bound = k.bound AND v_busy
	 WHERE k.name = p_name AND (k.busy <> v_busy OR k.bound AND NOT v_busy);
END $$;

-- next_token returns the next token of p_name, whose row is locked.
CREATE OR REPLACE FUNCTION {NEXT}(p_name text, p_epoch integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	v_token bigint;
BEGIN
	FOR i IN 1..2 LOOP
		UPDATE {COUNTERS} k
		   SET seq = CASE WHEN k.epoch >= p_epoch THEN k.seq + 1 ELSE 1 END, epoch = greatest(k.epoch, p_epoch)
		 WHERE k.name = p_name AND (k.epoch < p_epoch OR k.seq < 4294967295)
		RETURNING (k.epoch::bigint << 32) | k.seq INTO v_token;
		EXIT WHEN FOUND;
		SELECT e.o_epoch INTO p_epoch FROM {NEWEPOCH}(false) e; -- the counter is full
	END LOOP;
	RETURN v_token;
END $$;

-- wake lets in, at commit, the queued requests of p_name that the grant
-- rules would now grant (the caller has dropped expired entries), in FIFO
-- order, and notifies them. With p_promote, the server hands the name over
-- (lockstate.Promote): each such request is granted as if it had asked
-- again, with the next token, for the TTL it asked for plus
-- lockstate.HandOffExtra (room for telling its owner), and committed
-- durably when its owner's bound says so. Without p_promote (a
-- transaction of InLockedTx, which may last long after this), and for an
-- entry that cannot be granted yet (within a grace period, or made by an
-- older version of this package without a hold TTL), the owner is only
-- woken to ask again. The payload is the name, then one line per owner:
-- "owner token created expires mode limit" (times in microseconds since
-- 1970) for a hold handed over, the owner alone for a wake-up; the name
-- alone wakes every waiter of the name. Each line goes to the channel of
-- the Store that queued the request (chan), which only that Store listens
-- to, or to the table's, which every Store of the table listens to (an
-- entry of an earlier version of this package, and the name alone):
-- PostgreSQL sends a notification to every session that listens to its
-- channel, and a Store's listener then costs the server and its client a
-- message for every hand-off of the table. It returns how many requests it
-- granted.
CREATE OR REPLACE FUNCTION {WAKE}(p_name text, p_promote boolean) RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	v_holders integer; -- counted once a queue entry is found
	v_excl    boolean;
	v_lim     integer; -- the shared holders' limit, or the queue's so far
	v_ahead   integer := 0;
	v_chans   text[] := '{}'; -- the channels to notify
	v_msgs    text[] := '{}'; -- and their payloads
	v_size    integer := octet_length(p_name);
	v_c       text;
	v_i       integer;
	v_line    text;
	v_n       integer := 0;
	v_epoch   integer;
	v_max_ttl bigint;
	v_grace   timestamptz;
	v_now     timestamptz;
	v_ttl     bigint;
	v_token   bigint;
	v_granted integer := 0;
	q         record;
BEGIN
	FOR q IN SELECT e.owner, e.mode, e.lim, e.hold_ttl, e.durable, e.chan FROM {HOLDS} e
	          WHERE e.name = p_name AND e.queued ORDER BY e.token LOOP
		IF v_holders IS NULL THEN
			SELECT count(*), coalesce(bool_or(e.mode = 1), false), min(e.lim) FILTER (WHERE e.mode = 2)
			  INTO v_holders, v_excl, v_lim
			  FROM {HOLDS} e WHERE e.name = p_name AND NOT e.queued;
			IF p_promote THEN
				SELECT i.epoch, i.max_ttl, i.grace INTO v_epoch, v_max_ttl, v_grace FROM {INCARNATION} i WHERE i.id;
				v_now := clock_timestamp();
			END IF;
		END IF;
		IF q.mode = 1 THEN
			EXIT WHEN v_holders > 0 OR v_ahead > 0;
		ELSE
			EXIT WHEN v_excl;
			-- A request for another limit than the holders' or the queue's
			-- ahead is not granted, and keeps those behind it out.
			EXIT WHEN v_lim IS NOT NULL AND q.lim <> v_lim;
			v_lim := q.lim;
			EXIT WHEN q.lim > 0 AND v_holders + v_ahead >= q.lim;
		END IF;
		v_line := q.owner;
		-- (v_epoch is NULL when the marker is missing: the next acquire
		-- starts the new incarnation, and its grace period.)
		IF p_promote AND q.hold_ttl IS NOT NULL AND v_epoch IS NOT NULL AND v_now >= v_grace THEN
			v_ttl := q.hold_ttl + least(greatest(q.hold_ttl / 20, 1000000), 50000000);
			IF q.durable < 0 OR v_ttl > q.durable THEN
				PERFORM set_config('synchronous_commit', 'on', true);
			ELSIF v_ttl > v_max_ttl THEN
				PERFORM {RAISE}(v_ttl); -- committed with the grant, or lost with it
				v_max_ttl := v_ttl;
			END IF;
			v_token := {NEXT}(p_name, v_epoch);
			UPDATE {HOLDS} e
			   SET queued = false, token = v_token, ttl_ns = q.hold_ttl, hold_ttl = NULL, durable = NULL, sid = NULL,
			       created = v_now, renewed = v_now, expires = v_now + ((v_ttl + 999) / 1000) * interval '1 microsecond'
			 WHERE e.name = p_name AND e.owner = q.owner
			-- (floor: PostgreSQL 12 and 13 extract a double, which may be a
			-- fraction of a microsecond off; the expiry told never later.)
			RETURNING v_line || ' ' || e.token || ' ' || floor(extract(epoch FROM e.created) * 1000000)::bigint
			          || ' ' || floor(extract(epoch FROM e.expires) * 1000000)::bigint || ' ' || e.mode || ' ' || e.lim
			INTO v_line;
			v_granted := v_granted + 1;
		END IF;
		v_c := coalesce(q.chan, {CHANNEL});
		v_i := array_position(v_chans, v_c);
		IF v_i IS NULL THEN
			v_chans := v_chans || v_c;
			v_msgs := v_msgs || (p_name || E'\n' || v_line);
		ELSE
			v_msgs[v_i] := v_msgs[v_i] || E'\n' || v_line;
		END IF;
		v_size := v_size + 1 + octet_length(v_line);
		v_n := v_n + 1;
		EXIT WHEN q.mode = 1; -- nobody behind an exclusive request can be granted
		v_ahead := v_ahead + 1;
	END LOOP;
	IF v_size > 7000 THEN
		-- NOTIFY payloads stop at 8000 bytes: wake every waiter instead,
		-- and those handed the name find it theirs when they ask.
		PERFORM pg_notify({CHANNEL}, p_name);
	ELSIF v_n > 0 THEN
		FOR v_i IN 1 .. array_length(v_chans, 1) LOOP
			PERFORM pg_notify(v_chans[v_i], v_msgs[v_i]);
		END LOOP;
	END IF;
	RETURN v_granted;
END $$;

-- acquire applies the grant rules of package lockstate to one request.
-- o_status: 0 granted, 1 extended (the owner held it already), 2 not
-- granted (o_after: nanoseconds until the first holder expires or the
-- grace period ends, 0 if neither), 3 the owner holds the name in another
-- mode or with another limit, 4 a shared request whose limit is not the
-- shared holders'. TTLs arrive in nanoseconds; expiries round them up to
-- microseconds, PostgreSQL's resolution, so that an expiry is never
-- earlier than the time read + TTL. A new hold is bound to session
-- p_session, if not NULL; a hold extended keeps its binding. o_bound says
-- whether the hold granted or extended is bound to p_session.
CREATE OR REPLACE FUNCTION {ACQUIRE}(
	p_name text, p_owner text, p_mode smallint, p_limit integer, p_ttl bigint,
	p_queue boolean, p_qttl bigint, p_host text, p_meta jsonb, p_durable bigint, p_session text, p_chan text,
	OUT o_status smallint, OUT o_token bigint, OUT o_created timestamptz,
	OUT o_renewed timestamptz, OUT o_expires timestamptz, OUT o_after bigint, OUT o_bound boolean)
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	v_epoch      integer;
	v_grace      timestamptz;
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
	v_max_ttl    bigint;
	v_busy       boolean;
	v_moved      boolean := false;
	v_known      boolean;
	v_sync       text;
	v_sid        text;
	v_chan       text;
BEGIN
	o_bound := false;
	-- The fast path, in one statement: an exclusive request on a name whose
	-- row is not busy and has no inline hold that may be live (a hold past
	-- its own expiry in a session goes the long way), with the marker there,
	-- past the grace period, takes the inline hold with the name's next
	-- token. Its commit waits for the disk as begin would have it: not for
	-- a lease the marker's max_ttl covers and the caller's bound allows,
	-- else yes. A lease that would need a raise of max_ttl first, a new
	-- name and every other case go on below.
	IF p_mode = 1 THEN
		UPDATE {COUNTERS} k
		   SET seq = CASE WHEN k.epoch >= i.epoch THEN k.seq + 1 ELSE 1 END,
		       epoch = greatest(k.epoch, i.epoch),
		       xo = p_owner, xh = p_host, xm = p_meta, xttl = p_ttl, xs = p_session,
		       xt = (greatest(k.epoch, i.epoch)::bigint << 32) | CASE WHEN k.epoch >= i.epoch THEN k.seq + 1 ELSE 1 END,
		       xc = t.now, xr = t.now, xe = t.now + ((p_ttl + 999) / 1000) * interval '1 microsecond'
		  FROM (SELECT clock_timestamp() AS now) t, {INCARNATION} i
		 WHERE i.id AND k.name = p_name AND NOT k.busy AND (k.xo IS NULL OR (k.xe <= t.now AND k.xs IS NULL))
		   AND (k.epoch < i.epoch OR k.seq < 4294967295) AND t.now >= i.grace
		   AND (p_durable < 0 OR p_ttl > p_durable OR p_ttl <= i.max_ttl)
		   AND set_config('synchronous_commit',
		                  CASE WHEN p_durable >= 0 AND p_ttl <= p_durable THEN 'off' ELSE 'on' END, true) IS NOT NULL
		RETURNING k.xt, k.xc, k.xe INTO o_token, o_created, o_expires;
		IF FOUND THEN
			o_status := 0; o_renewed := o_created; o_after := 0; o_bound := p_session IS NOT NULL;
			RETURN;
		END IF;
	END IF;

	-- begin's common case, inline: the marker is there, and the lease
	-- needs no flush and no raise of max_ttl. And whether the name has a
	-- row, in the same statement.
	SELECT i.epoch, i.max_ttl, i.grace, EXISTS (SELECT 1 FROM {COUNTERS} k WHERE k.name = p_name),
	       CASE WHEN p_durable >= 0 AND p_ttl <= p_durable AND p_ttl <= i.max_ttl
	            THEN set_config('synchronous_commit', 'off', true) END
	  INTO v_epoch, v_max_ttl, v_grace, v_known, v_sync FROM {INCARNATION} i WHERE i.id;
	IF NOT FOUND OR p_durable < 0 OR p_ttl > p_durable OR p_ttl > v_max_ttl THEN
		SELECT b.o_epoch, b.o_grace INTO v_epoch, v_grace FROM {BEGIN}(p_ttl, p_durable) b;
		v_known := EXISTS (SELECT 1 FROM {COUNTERS} k WHERE k.name = p_name);
	END IF;

	v_now := clock_timestamp();
	IF p_mode = 1 AND v_now >= v_grace THEN
		IF NOT v_known THEN
			-- A new name (or one reclaimed) takes an inline hold at once:
			-- its row takes the current epoch, read under the reclaim
			-- lock (see take).
			PERFORM pg_advisory_xact_lock_shared(hashtextextended({KEY}, 0));
			SELECT i.epoch INTO v_epoch FROM {INCARNATION} i WHERE i.id;
			INSERT INTO {COUNTERS} AS k (name, seq, epoch, xo, xt, xh, xm, xttl, xc, xr, xe, xs)
			SELECT p_name, 1, v_epoch, p_owner, (v_epoch::bigint << 32) | 1, p_host, p_meta, p_ttl, t.now, t.now,
			       t.now + ((p_ttl + 999) / 1000) * interval '1 microsecond', p_session
			  FROM (SELECT clock_timestamp() AS now) t
			ON CONFLICT (name) DO NOTHING
			RETURNING k.xt, k.xc, k.xe INTO o_token, o_created, o_expires;
			IF FOUND THEN
				o_status := 0; o_renewed := o_created; o_after := 0; o_bound := p_session IS NOT NULL;
				RETURN;
			END IF;
		END IF;
	END IF;

	SELECT t.p_epoch, t.o_busy INTO v_epoch, v_busy FROM {TAKE}(p_name, v_epoch) t;
	v_now := clock_timestamp();
	o_token := 0; o_created := v_now; o_renewed := v_now; o_expires := v_now; o_after := 0;

	-- In one statement: the caller's live entry, if any, and what the rules
	-- need to know about the other live entries (expired ones are dropped
	-- just below, which changes none of this).
	SELECT o.queued, o.mode, o.lim, o.token, o.expires, o.sid, o.chan,
	       a.n_expired, a.n_holders, a.x_holders, a.n_ahead, a.x_ahead, a.first_expiry, a.lim_conflict
	  INTO v_queued, v_mode, v_lim, v_ticket, v_qexpires, v_sid, v_chan,
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
		ELSE
			UPDATE {HOLDS} e
			   SET ttl_ns = p_ttl, renewed = v_now, host = p_host, meta = p_meta,
			       expires = v_now + ((p_ttl + 999) / 1000) * interval '1 microsecond'
			 WHERE e.name = p_name AND e.owner = p_owner
			RETURNING e.token, e.created, e.renewed, e.expires
			     INTO o_token, o_created, o_renewed, o_expires;
			o_status := 1;
			o_bound := coalesce(v_sid = p_session, false);
		END IF;
	ELSIF p_mode = 2 AND v_conflict THEN
		o_status := 4;
	ELSE
		IF p_mode = 1 THEN
			v_ok := v_holders = 0 AND v_ahead = 0;
		ELSE
			v_ok := NOT v_excl AND NOT v_excl_ahead AND (p_limit = 0 OR v_holders + v_ahead < p_limit);
		END IF;
		IF v_ok AND v_now >= v_grace THEN
			o_token := {NEXT}(p_name, v_epoch);
			o_expires := v_now + ((p_ttl + 999) / 1000) * interval '1 microsecond';
			IF v_found THEN -- leaves the queue
				UPDATE {HOLDS} e
				   SET queued = false, mode = p_mode, lim = p_limit, token = o_token, host = p_host,
				       meta = p_meta, ttl_ns = p_ttl, created = v_now, renewed = v_now, expires = o_expires,
				       hold_ttl = NULL, durable = NULL, sid = p_session
				 WHERE e.name = p_name AND e.owner = p_owner;
				v_moved := true; -- the entries behind it move up
			ELSE
				INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, sid)
				VALUES (p_name, p_owner, false, p_mode, p_limit, o_token, p_host, p_meta, p_ttl, v_now, v_now, o_expires, p_session);
			END IF;
			o_status := 0;
			o_bound := p_session IS NOT NULL;
			IF o_bound THEN
				UPDATE {COUNTERS} k SET bound = true WHERE k.name = p_name AND NOT k.bound;
			END IF;
		ELSE
			IF p_queue THEN
				IF v_found THEN
					-- Refresh only when half the entry's time is used, so that a
					-- waiter that polls often does not write each time, or when
					-- another Store asks for the owner now.
					IF v_qexpires - v_now < ((p_qttl / 2 + 999) / 1000) * interval '1 microsecond'
					   OR v_chan IS DISTINCT FROM p_chan THEN
						UPDATE {HOLDS} e
						   SET renewed = v_now, expires = v_now + ((p_qttl + 999) / 1000) * interval '1 microsecond',
						       hold_ttl = p_ttl, durable = p_durable, chan = p_chan
						 WHERE e.name = p_name AND e.owner = p_owner;
					END IF;
				ELSE
					WITH t AS (
						UPDATE {COUNTERS} k SET ticket = k.ticket + 1, busy = true WHERE k.name = p_name RETURNING k.ticket
					)
					INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires,
					                     hold_ttl, durable, chan)
					SELECT p_name, p_owner, true, p_mode, p_limit, t.ticket, p_host, p_meta, p_qttl, v_now, v_now,
					       v_now + ((p_qttl + 999) / 1000) * interval '1 microsecond', p_ttl, p_durable, p_chan
					  FROM t;
					v_busy := true;
				END IF;
			END IF;
			o_status := 2;
			IF v_first IS NOT NULL OR v_now < v_grace THEN
				o_after := (extract(epoch FROM greatest(v_first, v_grace) - v_now) * 1000000000)::bigint;
			END IF;
		END IF;
	END IF;
	IF v_gone > 0 OR v_moved THEN
		PERFORM {WAKE}(p_name, true);
	END IF;
	-- Entries were only added or changed: if the name had some, it has.
	IF NOT v_busy OR v_gone > 0 THEN
		PERFORM {SETTLE}(p_name);
	END IF;
END $$;

-- join is acquire for an exclusive request to wait on a name that is
-- likely busy, the commonest call under contention, in a lighter call: an
-- owner without an entry, on a name whose entries are all live (so it
-- cannot be granted, and nothing is to be dropped), joins the queue. The
-- first statement locks the name's row, so that the second reads the
-- entries as every change before it left them; a ticket taken for nothing
-- (the second statement inserts no entry) is only a gap. Anything else
-- goes to acquire.
CREATE OR REPLACE FUNCTION {JOIN}(
	p_name text, p_owner text, p_mode smallint, p_limit integer, p_ttl bigint,
	p_queue boolean, p_qttl bigint, p_host text, p_meta jsonb, p_durable bigint, p_session text, p_chan text,
	OUT o_status smallint, OUT o_token bigint, OUT o_created timestamptz,
	OUT o_renewed timestamptz, OUT o_expires timestamptz, OUT o_after bigint, OUT o_bound boolean)
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	v_ticket bigint;
	v_now    timestamptz;
	v_first  timestamptz;
BEGIN
	o_bound := false;
	IF p_mode = 1 AND p_queue THEN
		UPDATE {COUNTERS} k SET ticket = k.ticket + 1
		 WHERE k.name = p_name AND k.busy AND k.xo IS NULL
		   AND NOT EXISTS (SELECT 1 FROM {HOLDS} o WHERE o.name = p_name AND o.owner = p_owner) -- (a waiter asking again)
		RETURNING k.ticket INTO v_ticket;
		IF FOUND THEN
			WITH s AS (
				SELECT t.now, CASE WHEN h.first IS NOT NULL OR t.now < i.grace THEN greatest(h.first, i.grace) END AS after
				  FROM (SELECT clock_timestamp() AS now) t
				  JOIN {INCARNATION} i ON i.id
				 CROSS JOIN LATERAL (SELECT count(*) AS n, count(*) FILTER (WHERE e.expires <= t.now) AS gone,
				                            min(e.expires) FILTER (WHERE NOT e.queued) AS first
				                       FROM {HOLDS} e WHERE e.name = p_name) h
				 WHERE h.n > 0 AND h.gone = 0 AND (p_durable < 0 OR p_ttl > p_durable OR p_ttl <= i.max_ttl)
				   AND NOT EXISTS (SELECT 1 FROM {HOLDS} o WHERE o.name = p_name AND o.owner = p_owner)
				   AND set_config('synchronous_commit',
				                  CASE WHEN p_durable >= 0 AND p_ttl <= p_durable THEN 'off' ELSE 'on' END, true) IS NOT NULL
			), n AS (
				INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires,
				                     hold_ttl, durable, chan)
				SELECT p_name, p_owner, true, 1, p_limit, v_ticket, p_host, p_meta, p_qttl, s.now, s.now,
				       s.now + ((p_qttl + 999) / 1000) * interval '1 microsecond', p_ttl, p_durable, p_chan
				  FROM s
				RETURNING 1
			)
			SELECT s.now, s.after INTO v_now, v_first FROM s, n;
			IF FOUND THEN
				o_status := 2; o_token := 0; o_created := v_now; o_renewed := v_now; o_expires := v_now;
				o_after := coalesce((extract(epoch FROM v_first - v_now) * 1000000000)::bigint, 0);
				RETURN;
			END IF;
		END IF;
	END IF;
	SELECT * INTO o_status, o_token, o_created, o_renewed, o_expires, o_after, o_bound
	  FROM {ACQUIRE}(p_name, p_owner, p_mode, p_limit, p_ttl, p_queue, p_qttl, p_host, p_meta, p_durable, p_session, p_chan) a;
END $$;

-- acquire as the earlier versions of this package call it: those of
-- schema 5 listen to the table's channel alone, and those before it bind
-- no session either.
CREATE OR REPLACE FUNCTION {ACQUIRE}(
	p_name text, p_owner text, p_mode smallint, p_limit integer, p_ttl bigint,
	p_queue boolean, p_qttl bigint, p_host text, p_meta jsonb, p_durable bigint, p_session text,
	OUT o_status smallint, OUT o_token bigint, OUT o_created timestamptz,
	OUT o_renewed timestamptz, OUT o_expires timestamptz, OUT o_after bigint, OUT o_bound boolean)
LANGUAGE sql AS $$
	SELECT * FROM {ACQUIRE}(p_name, p_owner, p_mode, p_limit, p_ttl, p_queue, p_qttl, p_host, p_meta, p_durable, p_session, NULL)
$$;
CREATE OR REPLACE FUNCTION {ACQUIRE}(
	p_name text, p_owner text, p_mode smallint, p_limit integer, p_ttl bigint,
	p_queue boolean, p_qttl bigint, p_host text, p_meta jsonb, p_durable bigint,
	OUT o_status smallint, OUT o_token bigint, OUT o_created timestamptz,
	OUT o_renewed timestamptz, OUT o_expires timestamptz, OUT o_after bigint, OUT o_bound boolean)
LANGUAGE sql AS $$
	SELECT * FROM {ACQUIRE}(p_name, p_owner, p_mode, p_limit, p_ttl, p_queue, p_qttl, p_host, p_meta, p_durable, NULL, NULL)
$$;

-- renew extends the live holds among (p_names[i], p_owners[i]) by
-- p_ttls[i] nanoseconds and returns one row per hold renewed (a hold in a
-- session keeps it). Holds that are not live are skipped without locking
-- their name.
CREATE OR REPLACE FUNCTION {RENEW}(p_names text[], p_owners text[], p_ttls bigint[], p_durable bigint)
RETURNS TABLE (o_i integer, o_token bigint, o_created timestamptz, o_renewed timestamptz, o_expires timestamptz)
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r      record;
	v_now  timestamptz;
	v_gone integer;
	v_done integer[];
BEGIN
	PERFORM {BEGIN}((SELECT max(t) FROM unnest(p_ttls) t), p_durable);
	-- The inline holds' rows are updated, and so locked, in name order, as
	-- every call that locks several names does: the plan is a nested loop
	-- over the sorted keys (a generic plan, which costs the arrays at ten
	-- rows, with sequential scans off), so no second pass locks them first.
	FOR r IN
		UPDATE {COUNTERS} k
		   SET xttl = u.ttl, xr = t.now, xe = t.now + ((u.ttl + 999) / 1000) * interval '1 microsecond'
		  FROM (SELECT * FROM unnest(p_names, p_owners, p_ttls) WITH ORDINALITY AS v(name, owner, ttl, i)
		         ORDER BY v.name COLLATE "C", v.i) u,
		       (SELECT clock_timestamp() AS now) t
		 WHERE k.name = u.name AND k.xo = u.owner
		   AND CASE WHEN k.xe > clock_timestamp() THEN true
		            WHEN k.xs IS NULL THEN false
		            ELSE coalesce({ALIVE}(k.xs) > clock_timestamp(), false) END
		RETURNING u.i::integer AS i, k.xt, k.xc, k.xr, k.xe
	LOOP
		v_done := v_done || r.i;
		o_i := r.i; o_token := r.xt; o_created := r.xc; o_renewed := r.xr; o_expires := r.xe;
		RETURN NEXT;
	END LOOP;
	IF coalesce(cardinality(v_done), 0) = cardinality(p_names) THEN
		RETURN;
	END IF;
	FOR r IN
		SELECT u.name, u.owner, u.ttl, u.i::integer AS i
		  FROM unnest(p_names, p_owners, p_ttls) WITH ORDINALITY AS u(name, owner, ttl, i)
		 WHERE NOT (u.i::integer = ANY (coalesce(v_done, '{}')))
		   AND EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = u.name AND e.owner = u.owner
		                  AND NOT e.queued AND (e.expires > clock_timestamp() OR e.sid IS NOT NULL))
		 ORDER BY u.name COLLATE "C", u.i
	LOOP
		PERFORM {TAKE}(r.name, 0);
		v_now := clock_timestamp();
		DELETE FROM {HOLDS} e WHERE e.name = r.name AND e.expires <= v_now;
		GET DIAGNOSTICS v_gone = ROW_COUNT;
		UPDATE {HOLDS} e
		   SET ttl_ns = r.ttl, renewed = v_now, expires = v_now + ((r.ttl + 999) / 1000) * interval '1 microsecond'
		 WHERE e.name = r.name AND e.owner = r.owner AND NOT e.queued
		RETURNING r.i, e.token, e.created, e.renewed, e.expires
		     INTO o_i, o_token, o_created, o_renewed, o_expires;
		IF FOUND THEN
			RETURN NEXT;
		END IF;
		IF v_gone > 0 THEN -- expired holders dropped: waiters may go
			PERFORM {WAKE}(r.name, true);
		END IF;
		PERFORM {SETTLE}(r.name);
	END LOOP;
END $$;

-- release removes the holds and queue entries (p_names[i], p_owners[i])
-- and returns, for each live one, whether it was a hold. Keys without a
-- live entry are skipped without locking their name.
CREATE OR REPLACE FUNCTION {RELEASE}(p_names text[], p_owners text[])
RETURNS TABLE (o_i integer, o_held boolean)
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r      record;
	v_now  timestamptz;
	v_gone integer;
	v_held boolean;
	v_done integer[];
BEGIN
	-- A release lost in a crash only brings the hold back until it
	-- expires, within the grace period.
	PERFORM set_config('synchronous_commit', 'off', true);
	-- Inline holds: nobody waits for their names. (xs means nothing once
	-- xo is NULL, and every grant sets it.)
	PERFORM 1 FROM {COUNTERS} k
	  JOIN unnest(p_names, p_owners) AS u(name, owner) ON k.name = u.name AND k.xo = u.owner
	 ORDER BY k.name FOR UPDATE OF k;
	FOR r IN
		UPDATE {COUNTERS} k SET xo = NULL, xm = NULL
		  FROM unnest(p_names, p_owners) WITH ORDINALITY AS u(name, owner, i)
		 WHERE k.name = u.name AND k.xo = u.owner
		RETURNING u.i::integer AS i,
		          k.xe > clock_timestamp()
		          OR EXISTS (SELECT 1 FROM {SESSIONS} s WHERE s.id = k.xs AND s.expires > clock_timestamp()) AS held
	LOOP
		v_done := v_done || r.i;
		o_i := r.i; o_held := r.held;
		RETURN NEXT;
	END LOOP;
	IF coalesce(cardinality(v_done), 0) = cardinality(p_names) THEN
		RETURN;
	END IF;
	FOR r IN
		SELECT u.name, u.owner, u.i::integer AS i
		  FROM unnest(p_names, p_owners) WITH ORDINALITY AS u(name, owner, i)
		 WHERE NOT (u.i::integer = ANY (coalesce(v_done, '{}')))
		   AND EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = u.name AND e.owner = u.owner
		                  AND (e.expires > clock_timestamp() OR e.sid IS NOT NULL))
		 ORDER BY u.name COLLATE "C", u.i
	LOOP
		PERFORM {TAKE}(r.name, 0);
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
		-- A request granted here holds the name, which was busy.
		IF v_gone = 0 OR {WAKE}(r.name, true) = 0 THEN
			PERFORM {SETTLE}(r.name);
		END IF;
		o_i := r.i;
		o_held := v_held;
		RETURN NEXT;
	END LOOP;
END $$;

-- release_one is release of one key, in a lighter call, and returns
-- whether it was a hold, NULL if the key has no live entry. Its fast
-- paths are the release of an inline hold (nobody waits for the name) and
-- the commonest release under contention: a live exclusive hold handed to
-- the head of the queue, an exclusive request that wake would grant at
-- once without a raise of max_ttl (the marker there, past the grace
-- period, the name's counter in the current epoch and not full), on a name
-- without expired entries. The first statement of the hand-off locks the
-- name's row as it takes the name's next token, so that the second reads
-- the entries as every change before it left them; it checks all that,
-- and the third hands the name over, as take, the deletion and wake would,
-- committed durably when the owner's bound says so. A token taken for no
-- hand-off is given back, under the same lock, so that tokens stay
-- consecutive. Anything else goes the long way, to release.
CREATE OR REPLACE FUNCTION {RELEASE1}(p_name text, p_owner text) RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	r       record;
	v_now   timestamptz;
	v_held  boolean;
	v_token bigint;
	v_max   bigint;
	v_grace timestamptz;
	v_line  text;
BEGIN
	-- (As in release.)
	PERFORM set_config('synchronous_commit', 'off', true);
	UPDATE {COUNTERS} k SET xo = NULL, xm = NULL
	 WHERE k.name = p_name AND k.xo = p_owner
	RETURNING k.xe > clock_timestamp()
	          OR EXISTS (SELECT 1 FROM {SESSIONS} s WHERE s.id = k.xs AND s.expires > clock_timestamp())
	     INTO v_held;
	IF FOUND THEN
		RETURN v_held;
	END IF;
	UPDATE {COUNTERS} k SET seq = k.seq + 1
	  FROM {INCARNATION} i
	 WHERE i.id AND k.name = p_name AND k.busy AND k.xo IS NULL AND clock_timestamp() >= i.grace
	   AND k.epoch >= i.epoch AND k.seq < 4294967295
	RETURNING (k.epoch::bigint << 32) | k.seq, i.max_ttl, i.grace INTO v_token, v_max, v_grace;
	IF FOUND THEN
		v_now := clock_timestamp();
		SELECT q.owner, q.ttl, coalesce(q.chan, {CHANNEL}) AS chan, q.durable < 0 OR q.ttl > q.durable AS sync INTO r
		  FROM (SELECT e.owner, e.mode, e.hold_ttl, e.durable, e.chan,
		               e.hold_ttl + least(greatest(e.hold_ttl / 20, 1000000), 50000000) AS ttl
		          FROM {HOLDS} e WHERE e.name = p_name AND e.queued AND e.expires > v_now
		         ORDER BY e.token LIMIT 1) q
		 WHERE v_now >= v_grace AND q.mode = 1 AND q.hold_ttl IS NOT NULL AND q.durable IS NOT NULL
		   AND (q.durable < 0 OR q.ttl > q.durable OR q.ttl <= v_max)
		   AND EXISTS (SELECT 1 FROM {HOLDS} m
		                WHERE m.name = p_name AND m.owner = p_owner AND NOT m.queued AND m.mode = 1 AND m.expires > v_now)
		   AND NOT EXISTS (SELECT 1 FROM {HOLDS} x WHERE x.name = p_name AND x.expires <= v_now);
		IF FOUND THEN
			IF r.sync THEN
				PERFORM set_config('synchronous_commit', 'on', true);
			END IF;
			WITH d AS (
				DELETE FROM {HOLDS} e WHERE e.name = p_name AND e.owner = p_owner
			)
			UPDATE {HOLDS} e
			   SET queued = false, token = v_token, ttl_ns = e.hold_ttl, hold_ttl = NULL, durable = NULL, sid = NULL,
			       created = v_now, renewed = v_now, expires = v_now + ((r.ttl + 999) / 1000) * interval '1 microsecond'
			 WHERE e.name = p_name AND e.owner = r.owner
			-- As wake tells it.
			RETURNING p_name || E'\n' || e.owner || ' ' || e.token || ' ' || floor(extract(epoch FROM e.created) * 1000000)::bigint
			          || ' ' || floor(extract(epoch FROM e.expires) * 1000000)::bigint || ' ' || e.mode || ' ' || e.lim
			INTO v_line;
			PERFORM pg_notify(r.chan, v_line);
			RETURN true;
		END IF;
		UPDATE {COUNTERS} k SET seq = k.seq - 1 WHERE k.name = p_name; -- the token back: nobody got it
	END IF;
	SELECT bool_or(l.o_held) INTO v_held FROM {RELEASE}(ARRAY[p_name], ARRAY[p_owner]) l;
	RETURN v_held;
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
	-- (The loops pass over holds that their session keeps; the name's
	-- row lock and alive, or take, judge again.)
	FOR r IN SELECT k.name FROM {COUNTERS} k
	          WHERE k.xo IS NOT NULL AND k.xe <= clock_timestamp()
	            AND NOT EXISTS (SELECT 1 FROM {SESSIONS} s WHERE s.id = k.xs AND s.expires > clock_timestamp())
	          ORDER BY k.name LOOP
		v_now := clock_timestamp();
		RETURN QUERY
			WITH d AS (
				SELECT k.name, k.xo, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr, k.xe FROM {COUNTERS} k
				 WHERE k.name = r.name AND k.xo IS NOT NULL AND k.xe <= v_now
				   AND CASE WHEN k.xs IS NULL THEN true ELSE coalesce({ALIVE}(k.xs) <= v_now, true) END
				   FOR UPDATE
			), u AS (
				UPDATE {COUNTERS} k SET xo = NULL, xm = NULL FROM d WHERE k.name = d.name
			)
			SELECT d.name, d.xo, 1::smallint, 0, d.xt, d.xh, d.xm, d.xttl, d.xc, d.xr, d.xe, v_now FROM d;
	END LOOP;
	FOR r IN SELECT DISTINCT e.name FROM {HOLDS} e
	          WHERE e.expires <= clock_timestamp()
	            AND NOT EXISTS (SELECT 1 FROM {SESSIONS} s WHERE s.id = e.sid AND s.expires > clock_timestamp())
	          ORDER BY e.name LOOP
		PERFORM {TAKE}(r.name, 0);
		v_now := clock_timestamp();
		RETURN QUERY
			WITH d AS (DELETE FROM {HOLDS} e WHERE e.name = r.name AND e.expires <= v_now RETURNING e.*)
			SELECT d.name, d.owner, d.mode, d.lim, d.token, d.host, d.meta, d.ttl_ns,
			       d.created, d.renewed, d.expires, v_now
			  FROM d WHERE NOT d.queued;
		PERFORM {WAKE}(r.name, true);
		PERFORM {SETTLE}(r.name);
	END LOOP;
END $$;

-- reclaim, unless another reclaim ran in the last p_every ns, drops the
-- entries that expired longer ago than that, starts a new epoch and deletes
-- the rows of the names that nobody holds or waits for and that were given
-- no token in it: a name used again takes the current epoch, so it never
-- reissues a token. It returns how many rows went, or -1 if it did not run.
CREATE OR REPLACE FUNCTION {RECLAIM}(p_every bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	v_every interval := (p_every / 1000) * interval '1 microsecond';
	v_epoch integer;
	v_n     bigint;
	r       record;
BEGIN
	IF EXISTS (SELECT 1 FROM {EPOCHS} e WHERE e.id AND e.reclaimed > clock_timestamp() - v_every) THEN
		RETURN -1;
	END IF;
	PERFORM set_config('synchronous_commit', 'off', true);
	-- Rows are created under this lock, shared (see take).
	PERFORM pg_advisory_xact_lock(hashtextextended({KEY}, 0));
	UPDATE {EPOCHS} e SET reclaimed = clock_timestamp() WHERE e.id AND e.reclaimed <= clock_timestamp() - v_every;
	IF NOT FOUND THEN
		RETURN -1; -- another one just ran
	END IF;
	-- Entries that expired a while ago: their names would stay busy.
	FOR r IN SELECT DISTINCT e.name FROM {HOLDS} e
	          WHERE e.expires <= clock_timestamp() - v_every
	            AND NOT EXISTS (SELECT 1 FROM {SESSIONS} s WHERE s.id = e.sid AND s.expires > clock_timestamp())
	          ORDER BY e.name LOOP
		PERFORM {TAKE}(r.name, 0);
		DELETE FROM {HOLDS} e WHERE e.name = r.name AND e.expires <= clock_timestamp();
		PERFORM {WAKE}(r.name, true);
		PERFORM {SETTLE}(r.name);
	END LOOP;
	SELECT e.o_epoch INTO v_epoch FROM {NEWEPOCH}(false) e;
	DELETE FROM {COUNTERS} k
	 WHERE k.epoch < v_epoch AND NOT k.busy
	   AND CASE WHEN k.xo IS NULL THEN true
	            WHEN k.xe > clock_timestamp() THEN false
	            WHEN k.xs IS NULL THEN true
	            ELSE coalesce({ALIVE}(k.xs) <= clock_timestamp(), true) END;
	GET DIAGNOSTICS v_n = ROW_COUNT;
	RETURN v_n;
END $$;

-- list returns the holds and queue entries matching a name (or ''), a
-- prefix (or '') and an owner (or ''), expired ones included, with the
-- store's time. A hold in a session expires at the later of its own
-- expiry and its session's.
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
		                    e.created, e.renewed,
		                    greatest(e.expires, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = e.sid)), v_now
		  FROM {HOLDS} e
		 WHERE e.name = p_name AND starts_with(e.name, p_prefix) AND (p_owner = '' OR e.owner = p_owner)
		UNION ALL
		SELECT k.name, k.xo, false, 1::smallint, 0, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr,
		       greatest(k.xe, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = k.xs)), v_now
		  FROM {COUNTERS} k
		 WHERE k.name = p_name AND k.xo IS NOT NULL AND starts_with(k.name, p_prefix) AND (p_owner = '' OR k.xo = p_owner);
	ELSIF p_owner <> '' THEN
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed,
		                    greatest(e.expires, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = e.sid)), v_now
		  FROM {HOLDS} e
		 WHERE e.owner = p_owner AND starts_with(e.name, p_prefix)
		UNION ALL
		SELECT k.name, k.xo, false, 1::smallint, 0, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr,
		       greatest(k.xe, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = k.xs)), v_now
		  FROM {COUNTERS} k
		 WHERE k.xo = p_owner AND starts_with(k.name, p_prefix);
	ELSIF p_prefix <> '' THEN
		-- The range lets the primary key's index (COLLATE "C": byte order) find the prefix.
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed,
		                    greatest(e.expires, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = e.sid)), v_now
		  FROM {HOLDS} e
		 WHERE e.name >= p_prefix AND e.name < p_prefix || chr(1114111) AND starts_with(e.name, p_prefix)
		UNION ALL
		SELECT k.name, k.xo, false, 1::smallint, 0, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr,
		       greatest(k.xe, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = k.xs)), v_now
		  FROM {COUNTERS} k
		 WHERE k.name >= p_prefix AND k.name < p_prefix || chr(1114111) AND starts_with(k.name, p_prefix)
		   AND k.xo IS NOT NULL;
	ELSE
		RETURN QUERY SELECT e.name, e.owner, e.queued, e.mode, e.lim, e.token, e.host, e.meta, e.ttl_ns,
		                    e.created, e.renewed,
		                    greatest(e.expires, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = e.sid)), v_now
		  FROM {HOLDS} e
		UNION ALL
		SELECT k.name, k.xo, false, 1::smallint, 0, k.xt, k.xh, k.xm, k.xttl, k.xc, k.xr,
		       greatest(k.xe, (SELECT s.expires FROM {SESSIONS} s WHERE s.id = k.xs)), v_now
		  FROM {COUNTERS} k WHERE k.xo IS NOT NULL;
	END IF;
END $$;

-- bind, inside the transaction of Store.InLockedTx, takes the name's row
-- FOR UPDATE (holding it until that transaction ends, so that nothing is
-- granted on the name meanwhile) and drops the hold through which the
-- transaction waited its turn and got its token, if that hold is still
-- live. It wakes, at commit, the requests queued next.
CREATE OR REPLACE FUNCTION {BIND}(p_name text, p_owner text, p_token bigint) RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	v_ok boolean;
BEGIN
	UPDATE {COUNTERS} k SET xo = NULL, xm = NULL
	 WHERE k.name = p_name AND k.xo = p_owner AND k.xt = p_token
	   AND CASE WHEN k.xe > clock_timestamp() THEN true
	            WHEN k.xs IS NULL THEN false
	            ELSE coalesce({ALIVE}(k.xs) > clock_timestamp(), false) END;
	IF FOUND THEN
		RETURN true;
	END IF;
	PERFORM {TAKE}(p_name, 0);
	DELETE FROM {HOLDS} e
	 WHERE e.name = p_name AND e.owner = p_owner AND NOT e.queued
	   AND e.token = p_token AND e.expires > clock_timestamp();
	v_ok := FOUND;
	IF v_ok THEN
		PERFORM {WAKE}(p_name, false);
	END IF;
	PERFORM {SETTLE}(p_name);
	RETURN v_ok;
END $$;

COMMENT ON TABLE {COUNTERS} IS {VERSION};
