
CREATE TABLE IF NOT EXISTS {COUNTERS} (
	name   VARBINARY(255) NOT NULL,
	seq    BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'last fencing token handed out',
	ticket BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'last queue ticket handed out',
	PRIMARY KEY (name)
) ENGINE=InnoDB COMMENT='baton mysql store: fencing and queue counters, one row per lock name in use'
-- ;;
-- A fast table decides about a name while it holds the name's stripe,
-- the row CRC32(name) & 65535, FOR UPDATE. The rows exist from the start:
-- a new name's first grant inserts no InnoDB row, whose commit would wait
-- for a log flush. (A durable table serializes on the name's own counters
-- row, which it writes anyway.)
CREATE TABLE IF NOT EXISTS {STRIPES} (
	id SMALLINT UNSIGNED NOT NULL PRIMARY KEY
) ENGINE=InnoDB COMMENT='baton mysql store: the serializers of a fast table''s names'
-- ;;
INSERT IGNORE INTO {STRIPES} (id)
SELECT a.n << 12 | b.n << 8 | c.n << 4 | d.n FROM {HEX} a CROSS JOIN {HEX} b CROSS JOIN {HEX} c CROSS JOIN {HEX} d
-- ;;
CREATE TABLE IF NOT EXISTS {HOLDS} (
	name    VARBINARY(255) NOT NULL,
	owner   VARBINARY(128) NOT NULL,
	queued  TINYINT NOT NULL COMMENT '1: a queue entry, not a hold',
	mode    TINYINT NOT NULL COMMENT '1 exclusive, 2 shared',
	lim     INT NOT NULL COMMENT 'semaphore limit, 0 for none',
	token   BIGINT UNSIGNED NOT NULL COMMENT 'fencing token, or queue ticket',
	host    {HOSTTYPE} NOT NULL,
	meta    {METATYPE} NULL COMMENT 'JSON object',
	ttl_ns  BIGINT NOT NULL,
	created DATETIME(6) NOT NULL COMMENT 'UTC',
	renewed DATETIME(6) NOT NULL COMMENT 'UTC',
	expires DATETIME(6) NOT NULL COMMENT 'UTC',
	flags   TINYINT NOT NULL DEFAULT 0 COMMENT '1: a long lease, also in {LONG}; 2: meta is in {META}; 4: a hold an entry may queue behind (see RELEASE)',
	sid     VARBINARY(32) NOT NULL DEFAULT '' COMMENT 'the session the hold is bound to, or empty',
	hold_ttl BIGINT NOT NULL DEFAULT 0 COMMENT 'a queue entry: the TTL of the hold it asks for; 0: not handed over (see RELEASE)',
	PRIMARY KEY (name, owner) USING BTREE,
	KEY owner_ix (owner) USING BTREE,
	KEY sid_ix (sid) USING BTREE
) ENGINE={ENGINE} COMMENT='baton mysql store: holds and queue entries'
-- ;;
-- The sessions of a fast table's clients (see SESSION). A hold bound to
-- one expires no earlier than it: its expires is the later of its own and
-- its session's, and a session's renewal extends its holds.
CREATE TABLE IF NOT EXISTS {SESSIONS} (
	id      VARBINARY(32) NOT NULL,
	ttl_ns  BIGINT NOT NULL,
	expires DATETIME(6) NOT NULL COMMENT 'UTC',
	PRIMARY KEY (id) USING BTREE
) ENGINE=MEMORY COMMENT='baton mysql store: sessions'
-- ;;
-- The durable epoch of the lock state (see INCARNATE) and the longest TTL
-- of a lease granted without a flush.
CREATE TABLE IF NOT EXISTS {EPOCHS} (
	id      TINYINT NOT NULL PRIMARY KEY,
	epoch   INT UNSIGNED NOT NULL,
	max_ttl BIGINT NOT NULL COMMENT 'nanoseconds'
) ENGINE=InnoDB COMMENT='baton mysql store: epochs'
-- ;;
INSERT IGNORE INTO {EPOCHS} (id, epoch, max_ttl) VALUES (1, 0, 0)
-- ;;
-- The counters of the names in use when {HOLDS} is a MEMORY table, and
-- the marker of the server's incarnation, the row named '': its epoch,
-- the server it is on, the end of its grace period, the floor of new
-- names' counters.
CREATE TABLE IF NOT EXISTS {STATE} (
	name    VARBINARY(255) NOT NULL,
	seq     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'last fencing token handed out',
	ticket  BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'last queue ticket handed out',
	epoch   INT UNSIGNED NULL,
	server  BINARY(20) NULL COMMENT 'SHA-1 of the server id, host and port',
	grace   DATETIME(6) NULL COMMENT 'UTC: nothing is granted before',
	max_ttl BIGINT NULL,
	PRIMARY KEY (name) USING BTREE
) ENGINE=MEMORY COMMENT='baton mysql store: counters and incarnation'
-- ;;
-- Leases longer than the grace period, kept durably so that a new
-- incarnation brings them back.
CREATE TABLE IF NOT EXISTS {LONG} (
	name    VARBINARY(255) NOT NULL,
	owner   VARBINARY(128) NOT NULL,
	mode    TINYINT NOT NULL,
	lim     INT NOT NULL,
	token   BIGINT UNSIGNED NOT NULL,
	host    BLOB NOT NULL,
	meta    BLOB NULL,
	ttl_ns  BIGINT NOT NULL,
	created DATETIME(6) NOT NULL,
	renewed DATETIME(6) NOT NULL,
	expires DATETIME(6) NOT NULL,
	PRIMARY KEY (name, owner)
) ENGINE=InnoDB COMMENT='baton mysql store: long leases'
-- ;;
-- Metadata too long for a MEMORY row of {HOLDS}, keyed by the entry's
-- token (or ticket).
CREATE TABLE IF NOT EXISTS {META} (
	name  VARBINARY(255) NOT NULL,
	owner VARBINARY(128) NOT NULL,
	token BIGINT UNSIGNED NOT NULL,
	meta  BLOB NOT NULL,
	PRIMARY KEY (name, owner)
) ENGINE=InnoDB COMMENT='baton mysql store: long metadata'
-- ;;
DROP PROCEDURE IF EXISTS {RENEW}
-- ;;
CREATE PROCEDURE {RENEW}(IN p_holds LONGTEXT CHARACTER SET utf8mb4)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- renew extends the live holds of a JSON array of [hex name, hex owner,
-- TTL in nanoseconds], sorted by name, and returns
-- "i,token,created,renewed,expires;" for each hold renewed (i counts from
-- 1). Holds that are not live are skipped without locking their name.
--
-- One hold (a lease's own renewal) takes a few statements on its name. A
-- batch (keepalive's, for a client holding many locks) takes the same
-- steps once for all its names, whatever their number: one statement
-- locks each name's stripe (a fast table's) and then its row (which a fast
-- table has only for InLockedTx), in the order of stripe and then name, as
-- RELEASE does, so that no two calls wait for each other in a cycle.
proc: BEGIN
	DECLARE v_n, v_x, v_long INT DEFAULT 0;
	DECLARE v_name VARBINARY(255);
	DECLARE v_owner VARBINARY(128);
	DECLARE v_ttl BIGINT;
	DECLARE v_token BIGINT UNSIGNED;
	DECLARE v_now, v_created, v_expires DATETIME(6);
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE v_out LONGTEXT CHARACTER SET ascii DEFAULT '';
	DECLARE v_live LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
	DECLARE v_f TINYINT DEFAULT 0;
	DECLARE v_max_ttl, v_gcl BIGINT DEFAULT NULL;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE v_sid VARBINARY(32) DEFAULT '';
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		IF v_gcl IS NOT NULL THEN SET SESSION group_concat_max_len = v_gcl; END IF;
		RESIGNAL;
	END;

	IF {FAST} THEN
		-- A new incarnation brings back the long leases (see INCARNATE).
		SELECT max_ttl, server INTO v_max_ttl, v_srv FROM {STATE} WHERE name = '';
		IF v_max_ttl IS NULL OR v_srv <> {SERVERID} THEN
			CALL {INCARNATE}();
			SET v_max_ttl = NULL;
			SELECT max_ttl INTO v_max_ttl FROM {STATE} WHERE name = '';
		END IF;
	END IF;
	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	IF JSON_LENGTH(p_holds) = 1 THEN
		SET v_name = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_holds, '$[0][0]'))),
		    v_owner = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_holds, '$[0][1]'))),
		    v_ttl = JSON_EXTRACT(p_holds, '$[0][2]');
		SELECT COUNT(*) INTO v_x FROM {HOLDS}
		 WHERE name = v_name AND owner = v_owner AND queued = 0 AND expires > UTC_TIMESTAMP(6);
		IF v_x = 1 THEN
			IF {FAST} THEN
				SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(v_name) & 65535 FOR UPDATE;
			END IF;
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
			SET v_now = UTC_TIMESTAMP(6);
			DELETE FROM {HOLDS} WHERE name = v_name AND expires <= v_now;
			SELECT COUNT(*), COALESCE(MAX(token), 0), MAX(created), COALESCE(MAX(flags), 0), MAX(sid) INTO v_n, v_token, v_created, v_f, v_sid
			  FROM {HOLDS} WHERE name = v_name AND owner = v_owner AND queued = 0 AND expires > v_now;
			IF v_n = 1 AND {FAST} AND v_f & 1 = 0 AND v_ttl > v_max_ttl THEN
				SET v_n = 0; -- longer than the grace period covers (the client RAISEs first)
			END IF;
			IF v_n = 1 THEN
				-- A hold in a session lives as long as the session too.
				SET v_expires = v_now + INTERVAL ((v_ttl + 999) DIV 1000) MICROSECOND;
				UPDATE {HOLDS} SET ttl_ns = v_ttl, renewed = v_now, expires = GREATEST(COALESCE({SESSIONEXP}sid), v_expires), v_expires)
				 WHERE name = v_name AND owner = v_owner;
				IF v_sid <> '' THEN
					SELECT expires INTO v_expires FROM {HOLDS} WHERE name = v_name AND owner = v_owner;
				END IF;
				IF v_f & 1 THEN
					UPDATE {LONG} SET ttl_ns = v_ttl, renewed = v_now, expires = v_expires
					 WHERE name = v_name AND owner = v_owner;
				END IF;
				SET v_out = CONCAT('1,', v_token, ',', {US}v_created), ',', {US}v_now), ',', {US}v_expires), ';');
			END IF;
		END IF;
	ELSE
		-- The results are built by GROUP_CONCAT, which cuts them at
		-- group_concat_max_len: the session's value is put back below.
		SET v_gcl = @@SESSION.group_concat_max_len;
		SET SESSION group_concat_max_len = 1 << 30;
		-- The live holds, in the order of their names' stripes, as [i,
		-- hex name, hex owner, TTL, stripe]. The table is read here and
		-- not in the statements that wait for the locks: a MEMORY table
		-- stays locked for the whole of a statement that reads it.
		SELECT CONCAT('[', GROUP_CONCAT('[', j.i, ',"', j.n, '","', j.o, '",', j.t, ',', CRC32(UNHEX(j.n)) & 65535, ']'
		                                ORDER BY CRC32(UNHEX(j.n)) & 65535, j.i), ']') INTO v_live
		  FROM JSON_TABLE(p_holds, '$[*]' COLUMNS (
		         i FOR ORDINALITY,
		         n VARCHAR(510) CHARACTER SET ascii PATH '$[0]',
		         o VARCHAR(256) CHARACTER SET ascii PATH '$[1]',
		         t BIGINT PATH '$[2]')) AS j
		 WHERE EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = UNHEX(j.n) AND e.owner = UNHEX(j.o) AND e.queued = 0
		                  AND e.expires > UTC_TIMESTAMP(6));
		IF v_live IS NOT NULL THEN
			-- An UPDATE that changes nothing: it locks the rows it finds,
			-- as SELECT … FOR UPDATE would (which MySQL refuses with a
			-- JSON_TABLE in it), and writes no log. The index is forced on
			-- every table joined here: a small table would be scanned, and
			-- the scan would wait for the rows of other names.
			IF {FAST} THEN
				-- Each name's stripe, then its row if it has one (only
				-- InLockedTx makes them).
				UPDATE JSON_TABLE(v_live, '$[*]' COLUMNS (
				         n VARCHAR(510) CHARACTER SET ascii PATH '$[1]',
				         s INT PATH '$[4]')) AS j
				  STRAIGHT_JOIN {STRIPES} t FORCE INDEX (PRIMARY) ON t.id = j.s
				  LEFT JOIN {COUNTERS} c FORCE INDEX (PRIMARY) ON c.name = UNHEX(j.n)
				   SET t.id = t.id, c.seq = c.seq;
			ELSE
				UPDATE JSON_TABLE(v_live, '$[*]' COLUMNS (n VARCHAR(510) CHARACTER SET ascii PATH '$[1]')) AS j
				  STRAIGHT_JOIN {COUNTERS} c FORCE INDEX (PRIMARY) ON c.name = UNHEX(j.n)
				   SET c.seq = c.seq;
			END IF;
			SET v_now = UTC_TIMESTAMP(6);
			DELETE h FROM JSON_TABLE(v_live, '$[*]' COLUMNS (n VARCHAR(510) CHARACTER SET ascii PATH '$[1]')) AS j
			  STRAIGHT_JOIN {HOLDS} h FORCE INDEX (PRIMARY) ON h.name = UNHEX(j.n)
			 WHERE h.expires <= v_now;
			-- A plain hold longer than the grace period covers is not
			-- renewed (the client RAISEs first).
			UPDATE JSON_TABLE(v_live, '$[*]' COLUMNS (
			         n VARCHAR(510) CHARACTER SET ascii PATH '$[1]',
			         o VARCHAR(256) CHARACTER SET ascii PATH '$[2]',
			         t BIGINT PATH '$[3]')) AS j
			  STRAIGHT_JOIN {HOLDS} h FORCE INDEX (PRIMARY) ON h.name = UNHEX(j.n) AND h.owner = UNHEX(j.o)
			   SET h.ttl_ns = j.t, h.renewed = v_now, h.expires = GREATEST(COALESCE({SESSIONEXP}h.sid), v_now + INTERVAL ((j.t + 999) DIV 1000) MICROSECOND),
			                                                          v_now + INTERVAL ((j.t + 999) DIV 1000) MICROSECOND)
			 WHERE h.queued = 0 AND h.expires > v_now AND (NOT {FAST} OR h.flags & 1 OR j.t <= v_max_ttl);
			SELECT COALESCE(GROUP_CONCAT(j.i, ',', h.token, ',', {US}h.created), ',', {US}h.renewed), ',', {US}h.expires)
			                             ORDER BY j.i SEPARATOR ';'), ''),
			       COALESCE(SUM(h.flags & 1), 0)
			  INTO v_out, v_long
			  FROM JSON_TABLE(v_live, '$[*]' COLUMNS (
			         i INT PATH '$[0]',
			         n VARCHAR(510) CHARACTER SET ascii PATH '$[1]',
			         o VARCHAR(256) CHARACTER SET ascii PATH '$[2]',
			         t BIGINT PATH '$[3]')) AS j
			  STRAIGHT_JOIN {HOLDS} h FORCE INDEX (PRIMARY) ON h.name = UNHEX(j.n) AND h.owner = UNHEX(j.o)
			 WHERE h.queued = 0 AND h.expires > v_now AND (NOT {FAST} OR h.flags & 1 OR j.t <= v_max_ttl);
			IF v_long > 0 THEN
				UPDATE JSON_TABLE(v_live, '$[*]' COLUMNS (
				         n VARCHAR(510) CHARACTER SET ascii PATH '$[1]',
				         o VARCHAR(256) CHARACTER SET ascii PATH '$[2]')) AS j
				  STRAIGHT_JOIN {HOLDS} h FORCE INDEX (PRIMARY) ON h.name = UNHEX(j.n) AND h.owner = UNHEX(j.o)
				  STRAIGHT_JOIN {LONG} l FORCE INDEX (PRIMARY) ON l.name = h.name AND l.owner = h.owner
				   SET l.ttl_ns = h.ttl_ns, l.renewed = h.renewed, l.expires = h.expires
				 WHERE h.queued = 0 AND h.flags & 1 AND h.renewed = v_now;
			END IF;
		END IF;
		SET SESSION group_concat_max_len = v_gcl;
	END IF;
	COMMIT;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	SELECT v_out;
END
-- ;;
DROP PROCEDURE IF EXISTS {RELEASE}
-- ;;
CREATE PROCEDURE {RELEASE}(IN p_keys LONGTEXT CHARACTER SET utf8mb4)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- release removes the holds and queue entries of a JSON array of [hex
-- name, hex owner, bell] and returns "i,held;" for each live entry removed,
-- held being 1 for a hold and 0 for a queue entry. Keys without a live
-- entry are skipped without locking their name. The bells that are not ''
-- are released (RELEASE_LOCK) once the entries are deleted and before the
-- commit: called on the session that holds them, this wakes the waiters
-- next in line a round trip and a log flush sooner than releasing them
-- after the CALL would, and a woken waiter's acquire then waits for this
-- commit on the name's row or stripe lock, so it never finds the entry
-- still there.
-- Keys prefixed with "q" (a Close) ask for no report: the answer may then
-- leave held keys out.
--
-- Hand-off: once a key's entry is gone, the name goes to the head of its
-- queue, in the same transaction, as the head's own request would be
-- granted (lockstate.Promote), when the head is an exclusive request and
-- no live hold is left. The hold gets the name's next token and lasts the
-- TTL the request asked for (hold_ttl) plus a twentieth of it, 1-50 ms
-- (lockstate.HandOffExtra): room for its owner to learn of it; it is bound
-- to no session. The head is not handed the name, but woken and asks, as
-- every waiter did before hand-off, when it asks for a shared hold, a
-- long lease or metadata kept in {META} (its hold_ttl is 0), or during a
-- grace period, or without room in the counter. The one statement of a
-- lease's release of a plain hold hands nothing over: every hold that an
-- entry queues behind is marked (flags 4) before the entry is written, by
-- the call that writes it (GRANT, TAKE's join) or, for a hold granted
-- while entries queue, by the call that grants it, and a marked hold is
-- released here, under the name's lock.
proc: BEGIN
	DECLARE v_single, v_gone INT DEFAULT 0;
	DECLARE v_quiet TINYINT DEFAULT 0;
	DECLARE v_name VARBINARY(255);
	DECLARE v_owner VARBINARY(128);
	DECLARE v_bell VARCHAR(64) CHARACTER SET ascii DEFAULT '';
	DECLARE v_lwt, v_gcl BIGINT DEFAULT NULL;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		IF v_gcl IS NOT NULL THEN SET SESSION group_concat_max_len = v_gcl; END IF;
		RESIGNAL;
	END;

	IF LEFT(p_keys, 1) = 'q' THEN
		SET v_quiet = 1, p_keys = SUBSTRING(p_keys, 2);
	END IF;
	SET v_single = JSON_LENGTH(p_keys) = 1;
	IF {FAST} AND v_single THEN
		-- A lease's own release of a plain hold that no entry queues
		-- behind (flags 0: see below) takes one statement: a
		-- statement on a MEMORY table is atomic, and a decision about
		-- the name that read the hold just before could only refuse a
		-- request, whose waiter the bell wakes. (It declares
		-- none of the variables of the block below, which a CALL would
		-- initialize each time.)
		SET v_name = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0][0]'))),
		    v_owner = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0][1]'))),
		    v_bell = COALESCE(JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0][2]')), '');
		DELETE FROM {HOLDS}
		 WHERE name = v_name AND owner = v_owner AND queued = 0 AND flags = 0 AND expires > UTC_TIMESTAMP(6);
		IF ROW_COUNT() = 1 THEN
			IF v_bell <> '' THEN
				DO RELEASE_LOCK(v_bell);
			END IF;
			SELECT '1,1;';
			LEAVE proc;
		END IF;
		-- A plain hold that an entry may queue behind goes the same way;
		-- then the name is locked below, to be handed over.
		DELETE FROM {HOLDS}
		 WHERE name = v_name AND owner = v_owner AND queued = 0 AND flags = 4 AND expires > UTC_TIMESTAMP(6);
		SET v_gone = ROW_COUNT();
	END IF;
	rest: BEGIN
	DECLARE v_done, v_i, v_n, v_x INT DEFAULT 0;
	DECLARE v_q, v_f TINYINT DEFAULT 0;
	DECLARE v_now DATETIME(6);
	DECLARE v_out LONGTEXT CHARACTER SET ascii DEFAULT '';
	DECLARE v_max_ttl BIGINT DEFAULT NULL;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE v_grace DATETIME(6) DEFAULT NULL;
	DECLARE v_epoch INT UNSIGNED DEFAULT 0;
	DECLARE v_hn, v_hq INT DEFAULT 0;
	DECLARE v_head VARBINARY(200) DEFAULT NULL;
	DECLARE v_httl BIGINT DEFAULT 0;
	DECLARE v_hseq BIGINT UNSIGNED DEFAULT NULL;
	DECLARE cur CURSOR FOR
		SELECT j.i, UNHEX(j.n), UNHEX(j.o)
		  FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (
		         i FOR ORDINALITY,
		         n VARCHAR(510) CHARACTER SET ascii PATH '$[0]',
		         o VARCHAR(256) CHARACTER SET ascii PATH '$[1]')) AS j
		 WHERE EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = UNHEX(j.n) AND e.owner = UNHEX(j.o) AND e.expires > UTC_TIMESTAMP(6))
		 ORDER BY CRC32(UNHEX(j.n)) & 65535, UNHEX(j.n), j.i;
	DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

	IF {FAST} THEN
		IF NOT v_single THEN
			-- So are a batch's plain holds (a Close), in two statements
			-- for them all, or one if no report is asked for; the loop
			-- below sees the other entries.
			IF NOT v_quiet THEN
				SET v_gcl = @@SESSION.group_concat_max_len;
				SET SESSION group_concat_max_len = 1 << 30;
				SELECT COALESCE(GROUP_CONCAT(j.i, ',1;' SEPARATOR ''), ''), COUNT(*) INTO v_out, v_n
				  FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (
				         i FOR ORDINALITY,
				         n VARCHAR(510) CHARACTER SET ascii PATH '$[0]',
				         o VARCHAR(256) CHARACTER SET ascii PATH '$[1]')) AS j
				  JOIN {HOLDS} h ON h.name = UNHEX(j.n) AND h.owner = UNHEX(j.o)
				 WHERE h.queued = 0 AND h.flags = 0 AND h.expires > UTC_TIMESTAMP(6);
				SET SESSION group_concat_max_len = v_gcl;
			END IF;
			DELETE h FROM {HOLDS} h
			  JOIN JSON_TABLE(p_keys, '$[*]' COLUMNS (
			         n VARCHAR(510) CHARACTER SET ascii PATH '$[0]',
			         o VARCHAR(256) CHARACTER SET ascii PATH '$[1]')) AS j
			    ON h.name = UNHEX(j.n) AND h.owner = UNHEX(j.o)
			 WHERE h.queued = 0 AND h.flags = 0;
			IF v_quiet THEN
				SET v_n = ROW_COUNT();
			END IF;
			IF v_n = JSON_LENGTH(p_keys) THEN
				-- Every key was a live plain hold (a Close, commonly): the
				-- loop below would find nothing. (Bells are "baton:…", and
				-- names and owners hex: most batches have no bell to ring,
				-- and a LOCATE costs less than a JSON_TABLE.)
				IF LOCATE('"baton:', p_keys) > 0 THEN
					SELECT COUNT(RELEASE_LOCK(j.b)) INTO v_x
					  FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (b VARCHAR(64) CHARACTER SET ascii PATH '$[2]')) AS j
					 WHERE j.b <> '';
				END IF;
				SELECT v_out;
				LEAVE proc;
			END IF;
		END IF;
		-- A long lease's hold comes back with a new incarnation: start it
		-- now, so that the release removes it.
		SELECT max_ttl, server, grace, epoch INTO v_max_ttl, v_srv, v_grace, v_epoch FROM {STATE} WHERE name = '';
		IF v_max_ttl IS NULL OR v_srv <> {SERVERID} THEN
			CALL {INCARNATE}();
		END IF;
	END IF;
	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	-- One key (a lease's own release) needs no cursor, which costs a
	-- temporary table.
	IF v_single THEN
		SET v_name = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0][0]'))),
		    v_owner = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0][1]'))),
		    v_bell = COALESCE(JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0][2]')), '');
	ELSE
		OPEN cur;
	END IF;
	release_loop: LOOP
		IF v_single THEN
			IF v_i = 1 THEN
				LEAVE release_loop;
			END IF;
			SET v_i = 1;
			IF NOT v_gone THEN
				SELECT COUNT(*) INTO v_x FROM {HOLDS}
				 WHERE name = v_name AND owner = v_owner AND expires > UTC_TIMESTAMP(6);
				IF v_x = 0 THEN
					LEAVE release_loop;
				END IF;
			END IF;
		ELSE
			FETCH cur INTO v_i, v_name, v_owner;
			IF v_done THEN
				LEAVE release_loop;
			END IF;
		END IF;
		IF v_gone THEN
			-- The plain hold is gone, and reported so: a transaction of
			-- InLockedTx that keeps the name's row past the lock wait
			-- only keeps the name from being handed over (its waiters
			-- are woken and ask).
			SET v_out = '1,1;';
			lock_gone: BEGIN
				DECLARE EXIT HANDLER FOR 1205 SET v_gone = 2;
				SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(v_name) & 65535 FOR UPDATE;
				SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
			END lock_gone;
			IF v_gone = 2 THEN
				LEAVE release_loop;
			END IF;
		ELSE
			IF {FAST} THEN
				SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(v_name) & 65535 FOR UPDATE;
			END IF;
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
		END IF;
		SET v_now = UTC_TIMESTAMP(6);
		IF v_gone THEN
			SET v_n = 1, v_q = 0, v_f = 0;
		ELSE
			SELECT COUNT(*), COALESCE(MAX(queued), 1), COALESCE(MAX(flags), 0) INTO v_n, v_q, v_f
			  FROM {HOLDS} WHERE name = v_name AND owner = v_owner AND expires > v_now;
			-- The entry, and the name's expired ones (lockstate drops
			-- them first), in two statements: a deletion of several rows
			-- of a MEMORY table can miss some (see GRANT), and the entry
			-- must go.
			DELETE FROM {HOLDS} WHERE name = v_name AND owner = v_owner;
		END IF;
		DELETE FROM {HOLDS} WHERE name = v_name AND expires <= v_now;
		SET v_x = ROW_COUNT();
		IF v_f & 3 THEN
			DELETE FROM {LONG} WHERE name = v_name AND owner = v_owner;
			DELETE FROM {META} WHERE name = v_name AND owner = v_owner;
		END IF;
		IF v_n = 1 OR v_x > 0 THEN
			-- The hand-off (see above). The head is read with what decides
			-- it: its ticket, mode, whether it is a long lease or has its
			-- metadata in {META}, and its hold's TTL, then its owner.
			SELECT COALESCE(SUM(queued = 0), 0), COALESCE(SUM(queued = 1), 0),
			       MIN(IF(queued = 1, CONCAT(LPAD(token, 20, '0'), mode, IF(flags & 3, 1, 0), LPAD(hold_ttl, 20, '0'), owner), NULL))
			  INTO v_hn, v_hq, v_head
			  FROM {HOLDS} WHERE name = v_name AND expires > v_now;
			SET v_httl = COALESCE(CAST(SUBSTRING(v_head, 23, 20) AS SIGNED), 0);
			IF v_hn = 0 AND SUBSTRING(v_head, 21, 2) = '10' AND v_httl > 0 THEN
				IF {FAST} THEN
					SELECT seq INTO v_hseq FROM {STATE} WHERE name = v_name;
				ELSE
					SELECT seq INTO v_hseq FROM {COUNTERS} WHERE name = v_name;
				END IF;
				-- GRANT's conditions: (the marker of this incarnation, read
				-- above,) a TTL the grace period covers, the grace period
				-- over, room in the counter.
				IF v_hseq IS NOT NULL AND (NOT {FAST} OR v_httl <= v_max_ttl AND (v_grace IS NULL OR v_now >= v_grace)
				                           AND v_hseq + 1 < (v_epoch + 1) << 32) THEN
					-- The counter first: a failure in between skips a token.
					UPDATE {SEQS} SET seq = v_hseq + 1 WHERE name = v_name;
					UPDATE {HOLDS}
					   SET queued = 0, token = v_hseq + 1, ttl_ns = v_httl, created = v_now, renewed = v_now, sid = '', hold_ttl = 0,
					       flags = IF(v_hq > 1, 4, 0),
					       expires = v_now + INTERVAL ((v_httl + LEAST(GREATEST(v_httl DIV 20, 1000000), 50000000) + 999) DIV 1000) MICROSECOND
					 WHERE name = v_name AND owner = SUBSTRING(v_head, 43) AND queued = 1;
				END IF;
				SET v_hseq = NULL;
			END IF;
		END IF;
		IF v_n = 1 AND NOT v_gone THEN
			SET v_out = CONCAT(v_out, v_i, ',', 1 - v_q, ';');
		END IF;
	END LOOP;
	IF v_single THEN
		IF v_bell <> '' THEN
			DO RELEASE_LOCK(v_bell);
		END IF;
	ELSE
		CLOSE cur;
		IF LOCATE('"baton:', p_keys) > 0 THEN
			SELECT COUNT(RELEASE_LOCK(j.b)) INTO v_x
			  FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (b VARCHAR(64) CHARACTER SET ascii PATH '$[2]')) AS j
			 WHERE j.b <> '';
		END IF;
	END IF;
	COMMIT;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	SELECT v_out;
	END rest;
END
-- ;;
DROP PROCEDURE IF EXISTS {RELEASE1}
-- ;;
CREATE PROCEDURE {RELEASE1}(IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_bell VARCHAR(64) CHARACTER SET ascii, IN p_busy TINYINT)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- release1 is RELEASE for one key, with the same answer: the release of
-- a lease's plain hold, and its hand-off, in a call lighter than
-- RELEASE's (no JSON, and only the variables the hand-off needs). p_busy
-- says the Store found the name busy lately: a hold that an entry may
-- queue behind (flags 4) is then tried first. Every other entry goes to
-- RELEASE.
proc: BEGIN
	DECLARE v_x INT DEFAULT 0;
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	IF {FAST} THEN
		-- RELEASE's first two statements, in the order p_busy gives.
		IF NOT p_busy THEN
			DELETE FROM {HOLDS}
			 WHERE name = p_name AND owner = p_owner AND queued = 0 AND flags = 0 AND expires > UTC_TIMESTAMP(6);
			SET v_x = ROW_COUNT();
		END IF;
		IF v_x = 0 THEN
			DELETE FROM {HOLDS}
			 WHERE name = p_name AND owner = p_owner AND queued = 0 AND flags = 4 AND expires > UTC_TIMESTAMP(6);
			SET v_x = ROW_COUNT() * 2;
		END IF;
		IF v_x = 0 AND p_busy THEN
			DELETE FROM {HOLDS}
			 WHERE name = p_name AND owner = p_owner AND queued = 0 AND flags = 0 AND expires > UTC_TIMESTAMP(6);
			SET v_x = ROW_COUNT();
		END IF;
		IF v_x = 1 THEN
			IF p_bell <> '' THEN
				DO RELEASE_LOCK(p_bell);
			END IF;
			SELECT '1,1;';
			LEAVE proc;
		END IF;
		IF v_x = 2 THEN handoff: BEGIN
			-- The hand-off, under the name's locks, as RELEASE's. The
			-- marker and the name's counter are read in one statement,
			-- under the stripe: a marker of another server (or none)
			-- hands nothing over, and the next acquire starts the
			-- incarnation. (Its variables are declared here: a CALL
			-- initializes those of the blocks it enters only.)
			DECLARE v_now, v_grace DATETIME(6) DEFAULT NULL;
			DECLARE v_hn, v_hq, v_hx INT DEFAULT 0;
			DECLARE v_max_ttl, v_httl BIGINT DEFAULT NULL;
			DECLARE v_seq BIGINT UNSIGNED DEFAULT NULL;
			DECLARE v_epoch INT UNSIGNED DEFAULT 0;
			DECLARE v_srv BINARY(20) DEFAULT NULL;
			DECLARE v_head VARBINARY(200) DEFAULT NULL;
			{LOCKWAIT}
			SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
			START TRANSACTION;
			lock_name: BEGIN
				DECLARE EXIT HANDLER FOR 1205 SET v_x = 3;
				SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(p_name) & 65535 FOR UPDATE;
				SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name FOR UPDATE;
			END lock_name;
			IF v_x <> 3 THEN
				SET v_now = UTC_TIMESTAMP(6);
				SELECT MAX(IF(name = '', epoch, NULL)), MAX(IF(name = '', grace, NULL)), MAX(IF(name = '', max_ttl, NULL)),
				       MAX(IF(name = '', server, NULL)), MAX(IF(name = '', NULL, seq))
				  INTO v_epoch, v_grace, v_max_ttl, v_srv, v_seq
				  FROM {STATE} WHERE name IN ('', p_name);
				-- The name's live holds and entries, its head (as in
				-- RELEASE) and its expired entries, in one read.
				SELECT COALESCE(SUM(queued = 0 AND expires > v_now), 0), COALESCE(SUM(queued = 1 AND expires > v_now), 0),
				       COALESCE(SUM(expires <= v_now), 0),
				       MIN(IF(queued = 1 AND expires > v_now, CONCAT(LPAD(token, 20, '0'), mode, IF(flags & 3, 1, 0), LPAD(hold_ttl, 20, '0'), owner), NULL))
				  INTO v_hn, v_hq, v_hx, v_head
				  FROM {HOLDS} WHERE name = p_name;
				IF v_hx > 0 THEN
					DELETE FROM {HOLDS} WHERE name = p_name AND expires <= v_now;
				END IF;
				SET v_httl = COALESCE(CAST(SUBSTRING(v_head, 23, 20) AS SIGNED), 0);
				-- GRANT's conditions, as in RELEASE.
				IF v_hn = 0 AND SUBSTRING(v_head, 21, 2) = '10' AND v_httl > 0 AND v_seq IS NOT NULL AND v_srv = {SERVERID}
				   AND v_httl <= v_max_ttl AND (v_grace IS NULL OR v_now >= v_grace) AND v_seq + 1 < (v_epoch + 1) << 32 THEN
					UPDATE {STATE} SET seq = v_seq + 1 WHERE name = p_name;
					UPDATE {HOLDS}
					   SET queued = 0, token = v_seq + 1, ttl_ns = v_httl, created = v_now, renewed = v_now, sid = '', hold_ttl = 0,
					       flags = IF(v_hq > 1, 4, 0),
					       expires = v_now + INTERVAL ((v_httl + LEAST(GREATEST(v_httl DIV 20, 1000000), 50000000) + 999) DIV 1000) MICROSECOND
					 WHERE name = p_name AND owner = SUBSTRING(v_head, 43) AND queued = 1;
				END IF;
			END IF;
			IF p_bell <> '' THEN
				DO RELEASE_LOCK(p_bell);
			END IF;
			COMMIT;
			SET SESSION innodb_lock_wait_timeout = v_lwt;
			SELECT '1,1;';
			LEAVE proc;
		END handoff; END IF;
	END IF;
	CALL {RELEASE}(JSON_ARRAY(JSON_ARRAY(HEX(p_name), HEX(p_owner), p_bell)));
END
-- ;;
DROP PROCEDURE IF EXISTS {PURGE}
-- ;;
CREATE PROCEDURE {PURGE}()
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- purge deletes the expired holds and queue entries of every name, one
-- transaction per name, and returns the holds: one result set per name
-- (name, owner, mode, lim, token, host, meta, ttl_ns, created, renewed,
-- expires, now).
BEGIN
	DECLARE v_done, v_x, v_locked INT DEFAULT 0;
	DECLARE v_name VARBINARY(255);
	DECLARE v_now DATETIME(6);
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE cur CURSOR FOR
		SELECT DISTINCT name FROM {HOLDS} WHERE expires <= UTC_TIMESTAMP(6) ORDER BY name;
	DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	{LOCKWAIT}
	OPEN cur;
	purge_loop: LOOP
		FETCH cur INTO v_name;
		IF v_done THEN
			LEAVE purge_loop;
		END IF;
		SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
		START TRANSACTION;
		SET v_locked = 0;
		lock_name: BEGIN
			DECLARE EXIT HANDLER FOR 1205 SET v_locked = 1;
			IF {FAST} THEN
				-- As in ACQUIRE, without waiting for InLockedTx.
				SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(v_name) & 65535 FOR UPDATE;
				SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name;
				IF v_x = 1 THEN
					SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE SKIP LOCKED;
					SET v_locked = 1 - v_x;
				END IF;
				LEAVE lock_name;
			END IF;
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
		END lock_name;
		IF v_locked = 1 THEN -- held by a transaction of InTx
			ROLLBACK;
		ELSE
			SET v_now = UTC_TIMESTAMP(6);
			SELECT h.name, h.owner, h.mode, h.lim, h.token, h.host, {METACOL}, h.ttl_ns,
			       {US}h.created), {US}h.renewed), {US}h.expires), {US}v_now)
			  FROM {HOLDS} h {METAJOIN} WHERE h.name = v_name AND h.expires <= v_now AND h.queued = 0;
			-- Until none is left: a deletion of several rows of a MEMORY
			-- table can miss some (see GRANT), which the next purge would
			-- return again.
			purge_name: LOOP
				DELETE FROM {HOLDS} WHERE name = v_name AND expires <= v_now;
				IF ROW_COUNT() < 1 THEN
					LEAVE purge_name;
				END IF;
			END LOOP;
			COMMIT;
		END IF;
	END LOOP;
	CLOSE cur;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
END
-- ;;
DROP PROCEDURE IF EXISTS {BIND}
-- ;;
CREATE PROCEDURE {BIND}(IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_token BIGINT UNSIGNED)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- bind runs inside the transaction of Store.InTx (it neither starts nor
-- ends one): it takes the name's counters row FOR UPDATE, which the
-- transaction then holds until it ends, so that nothing is granted on the
-- name meanwhile, and deletes the hold through which InTx waited its turn
-- and got its token, if that hold is still live. It returns 1 if it was.
-- A fast table's row is made by TXROW first. Without it (a process of a
-- version before stripes), the transaction holds the name's stripe
-- instead, which keeps out grants of the other names on the stripe too.
BEGIN
	DECLARE v_x INT DEFAULT 0;
	SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name FOR UPDATE;
	IF v_x = 0 AND {FAST} THEN
		SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(p_name) & 65535 FOR UPDATE;
	END IF;
	DELETE FROM {HOLDS}
	 WHERE name = p_name AND owner = p_owner AND queued = 0 AND token = p_token
	   AND expires > UTC_TIMESTAMP(6);
	SET v_x = ROW_COUNT();
	DELETE FROM {LONG} WHERE name = p_name AND owner = p_owner;
	DELETE FROM {META} WHERE name = p_name AND owner = p_owner;
	SELECT v_x;
END
-- ;;
DROP PROCEDURE IF EXISTS {TXROW}
-- ;;
CREATE PROCEDURE {TXROW}(IN p_name VARBINARY(255))
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- txrow makes sure that the name's counters row exists, for a transaction
-- of InLockedTx on a fast table to hold (see BIND). A missing row is
-- inserted while the name's stripe is locked, and committed: every acquire
-- that locks the stripe later finds the row, and waits while a transaction
-- holds it. Called by the holder of the name, before its transaction.
proc: BEGIN
	DECLARE v_x INT DEFAULT 0;
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;
	SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name;
	IF v_x = 1 THEN
		LEAVE proc;
	END IF;
	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(p_name) & 65535 FOR UPDATE;
	INSERT INTO {COUNTERS} (name) VALUES (p_name) ON DUPLICATE KEY UPDATE seq = seq;
	COMMIT;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
END
-- ;;
DROP PROCEDURE IF EXISTS {RECLAIM}
-- ;;
CREATE PROCEDURE {RECLAIM}(IN p_every BIGINT)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- reclaim, unless a reclaim ran in the last p_every microseconds, deletes
-- the counters rows of the names that have neither holds nor queue
-- entries, and raises the floor (the row named '', which no lock name is)
-- to their largest token, so that a name used again starts above every
-- token it had (see acquire). The floor row's ticket is when the last
-- reclaim ran, in microseconds of the server's clock. It returns how many
-- rows went, or -1 if it did not run.
proc: BEGIN
	DECLARE v_now, v_last, v_n BIGINT DEFAULT 0;
	DECLARE v_max BIGINT UNSIGNED DEFAULT 0;
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		DROP TEMPORARY TABLE IF EXISTS {RECLAIM}_idle, {RECLAIM}_gone, {RECLAIM}_keys;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	{LOCKWAIT}
	-- (Created outside the transaction: servers that enforce GTID
	-- consistency refuse it inside one.)
	DROP TEMPORARY TABLE IF EXISTS {RECLAIM}_idle, {RECLAIM}_gone, {RECLAIM}_keys;
	CREATE TEMPORARY TABLE {RECLAIM}_idle (
		name   VARBINARY(255) NOT NULL PRIMARY KEY,
		seq    BIGINT UNSIGNED NULL,
		ticket BIGINT UNSIGNED NULL
	);
	CREATE TEMPORARY TABLE {RECLAIM}_gone LIKE {RECLAIM}_idle;
	CREATE TEMPORARY TABLE {RECLAIM}_keys (
		name  VARBINARY(255) NOT NULL,
		owner VARBINARY(128) NOT NULL,
		PRIMARY KEY (name, owner)
	);
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	INSERT INTO {COUNTERS} (name) VALUES ('') ON DUPLICATE KEY UPDATE seq = seq;
	SELECT ticket INTO v_last FROM {COUNTERS} WHERE name = '' FOR UPDATE;
	SET v_now = {US}UTC_TIMESTAMP(6));
	IF v_last > v_now - p_every AND v_last <= v_now THEN
		ROLLBACK;
		DROP TEMPORARY TABLE {RECLAIM}_idle, {RECLAIM}_gone, {RECLAIM}_keys;
		SET SESSION innodb_lock_wait_timeout = v_lwt;
		SELECT -1;
		LEAVE proc;
	END IF;
	-- The idle names, read together with their counters (NULL: a name
	-- whose counters went with an earlier incarnation).
	INSERT INTO {RECLAIM}_idle (name, seq, ticket)
	SELECT c.name, c.seq, c.ticket FROM {SEQS} c
	 WHERE c.name <> '' AND NOT EXISTS (SELECT 1 FROM {HOLDS} h WHERE h.name = c.name);
	IF {FAST} THEN
		INSERT IGNORE INTO {RECLAIM}_idle (name, seq, ticket)
		SELECT c.name, NULL, NULL FROM {COUNTERS} c
		 WHERE c.name <> '' AND NOT EXISTS (SELECT 1 FROM {STATE} s WHERE s.name = c.name)
		   AND NOT EXISTS (SELECT 1 FROM {HOLDS} h WHERE h.name = c.name);
	END IF;
	-- Their rows (a fast table: their stripes, and their rows where they
	-- have one), locked, if their counters are unchanged since: every hold
	-- or queue entry comes with a new token or ticket, so such a name
	-- gained none. A row another transaction has locked (a call deciding
	-- about the name, a transaction of InLockedTx) is skipped, not waited
	-- for.
	IF {FAST} THEN
		INSERT INTO {RECLAIM}_gone (name, seq, ticket)
		SELECT i.name, i.seq, i.ticket FROM {RECLAIM}_idle i
		  STRAIGHT_JOIN {STRIPES} s FORCE INDEX (PRIMARY) ON s.id = CRC32(i.name) & 65535
		   FOR UPDATE SKIP LOCKED;
		-- The names with a row (read without locking, as INSERT … SELECT
		-- does at READ COMMITTED) are marked 0, those whose row is now
		-- locked 1; the others are held by InLockedTx.
		DELETE FROM {RECLAIM}_idle;
		INSERT INTO {RECLAIM}_idle (name, seq)
		SELECT c.name, 0 FROM {RECLAIM}_gone g STRAIGHT_JOIN {COUNTERS} c FORCE INDEX (PRIMARY) ON c.name = g.name;
		INSERT INTO {RECLAIM}_idle (name, seq)
		SELECT c.name, 1 FROM {RECLAIM}_gone g STRAIGHT_JOIN {COUNTERS} c FORCE INDEX (PRIMARY) ON c.name = g.name
		   FOR UPDATE SKIP LOCKED
		    ON DUPLICATE KEY UPDATE seq = 1;
		DELETE g FROM {RECLAIM}_gone g JOIN {RECLAIM}_idle i ON i.name = g.name WHERE i.seq = 0;
	ELSE
		INSERT INTO {RECLAIM}_gone (name, seq, ticket)
		SELECT c.name, i.seq, i.ticket FROM {COUNTERS} c
		  JOIN {RECLAIM}_idle i ON i.name = c.name
		   FOR UPDATE SKIP LOCKED;
	END IF;
	DELETE g FROM {RECLAIM}_gone g LEFT JOIN {SEQS} c ON c.name = g.name
	 WHERE NOT (c.seq <=> g.seq AND c.ticket <=> g.ticket);
	-- The floor goes up before the counters go: a MEMORY table's writes
	-- are seen at once, and a call that finds a name's counters gone
	-- reads the floor after.
	SELECT COALESCE(MAX(seq), 0) INTO v_max FROM {RECLAIM}_gone;
	UPDATE {SEQS} SET seq = GREATEST(seq, v_max) WHERE name = '';
	DELETE c FROM {RECLAIM}_gone g STRAIGHT_JOIN {COUNTERS} c FORCE INDEX (PRIMARY) ON c.name = g.name;
	SET v_n = ROW_COUNT();
	IF {FAST} THEN
		DELETE c FROM {STATE} c JOIN {RECLAIM}_gone g ON g.name = c.name;
		SELECT COUNT(*) INTO v_n FROM {RECLAIM}_gone;
		-- Long leases and long metadata whose entries are gone, but for
		-- rows another transaction has locked: a release deletes them
		-- while it holds stripes, which this transaction may hold too.
		INSERT INTO {RECLAIM}_keys (name, owner)
		SELECT l.name, l.owner FROM {LONG} l WHERE l.expires <= UTC_TIMESTAMP(6)
		   FOR UPDATE SKIP LOCKED;
		DELETE l FROM {RECLAIM}_keys k STRAIGHT_JOIN {LONG} l FORCE INDEX (PRIMARY) ON l.name = k.name AND l.owner = k.owner;
		DELETE FROM {RECLAIM}_keys;
		INSERT INTO {RECLAIM}_keys (name, owner)
		SELECT m.name, m.owner FROM {META} m
		 WHERE NOT EXISTS (SELECT 1 FROM {HOLDS} h
		                    WHERE h.name = m.name AND h.owner = m.owner AND h.token = m.token AND h.flags & 2)
		   FOR UPDATE SKIP LOCKED;
		DELETE m FROM {RECLAIM}_keys k STRAIGHT_JOIN {META} m FORCE INDEX (PRIMARY) ON m.name = k.name AND m.owner = k.owner;
	END IF;
	UPDATE {COUNTERS} SET ticket = v_now WHERE name = '';
	COMMIT;
	DROP TEMPORARY TABLE {RECLAIM}_idle, {RECLAIM}_gone, {RECLAIM}_keys;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	SELECT v_n;
END
-- ;;
DROP PROCEDURE IF EXISTS {KEEP}
-- ;;
CREATE PROCEDURE {KEEP}(IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_flags TINYINT,
	IN p_token BIGINT UNSIGNED, IN p_meta BLOB)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- keep writes, in the caller's transaction, what a MEMORY row of {HOLDS}
-- cannot keep: a lease longer than the grace period to {LONG} (flag 1), so
-- that a new incarnation brings it back; metadata too long for the row to
-- {META} (flag 2). Both are InnoDB: the commit is flushed.
BEGIN
	IF p_flags & 1 THEN
		REPLACE INTO {LONG} (name, owner, mode, lim, token, host, meta, ttl_ns, created, renewed, expires)
		SELECT name, owner, mode, lim, token, host, p_meta, ttl_ns, created, renewed, expires
		  FROM {HOLDS} WHERE name = p_name AND owner = p_owner;
	END IF;
	IF p_flags & 2 THEN
		REPLACE INTO {META} (name, owner, token, meta) VALUES (p_name, p_owner, p_token, p_meta);
	END IF;
END
-- ;;
DROP PROCEDURE IF EXISTS {INCARNATE}
-- ;;
CREATE PROCEDURE {INCARNATE}()
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- incarnate starts a new incarnation of the lock state, unless another
-- session did since the caller found the marker missing. {HOLDS} and
-- {STATE} are MEMORY tables: a restart of the server, clean or not,
-- empties them, and a replica promoted to primary may have rows its old
-- primary wrote. Either way they hold no grant of this incarnation, so
-- they are emptied; then, durably, the epoch goes up by one (tokens are
-- epoch << 32 | counter, so they stay above every token handed out
-- before), the long leases of {LONG} come back, and the marker records the
-- epoch, the server, and a grace period as long as the longest lease ever
-- granted without a flush: every hold the server forgot ends before its
-- name is granted again.
proc: BEGIN
	DECLARE v_got INT DEFAULT NULL;
	DECLARE v_epoch INT UNSIGNED DEFAULT NULL;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE v_max, v_heap, v_mdl BIGINT DEFAULT NULL;
	DECLARE v_now DATETIME(6);
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_heap IS NOT NULL THEN SET SESSION max_heap_table_size = v_heap, SESSION lock_wait_timeout = v_mdl; END IF;
		DO RELEASE_LOCK({INCLOCK});
		RESIGNAL;
	END;

	SELECT GET_LOCK({INCLOCK}, 5) INTO v_got;
	IF v_got IS NULL OR v_got <> 1 THEN
		SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'baton: another session started a new incarnation for more than 5 s';
	END IF;
	SELECT epoch, server INTO v_epoch, v_srv FROM {STATE} WHERE name = '';
	IF v_epoch IS NOT NULL AND v_srv = {SERVERID} THEN
		DO RELEASE_LOCK({INCLOCK});
		LEAVE proc;
	END IF;
	-- TRUNCATE also gives the tables this session's size limit, which a
	-- restart set back to the global max_heap_table_size. It waits for
	-- transactions that used the tables to end: a few seconds at most.
	SET v_heap = @@SESSION.max_heap_table_size, v_mdl = @@SESSION.lock_wait_timeout;
	SET SESSION max_heap_table_size = CAST(GREATEST(v_heap, {HEAPSIZE}) AS UNSIGNED), SESSION lock_wait_timeout = 5;
	TRUNCATE TABLE {HOLDS};
	TRUNCATE TABLE {STATE};
	TRUNCATE TABLE {SESSIONS};
	SET SESSION max_heap_table_size = v_heap, SESSION lock_wait_timeout = v_mdl;
	SET v_heap = NULL;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	UPDATE {EPOCHS} SET epoch = epoch + 1 WHERE id = 1;
	SELECT epoch, max_ttl INTO v_epoch, v_max FROM {EPOCHS} WHERE id = 1;
	COMMIT;
	SET v_now = UTC_TIMESTAMP(6);
	INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, flags)
	SELECT name, owner, 0, mode, lim, token, host, IF(LENGTH(meta) > {METAMAX}, NULL, meta), ttl_ns, created, renewed, expires,
	       IF(LENGTH(meta) > {METAMAX}, 3, 1)
	  FROM {LONG} WHERE expires > v_now;
	INSERT INTO {STATE} (name, seq, ticket, epoch, server, grace, max_ttl)
	VALUES ('', v_epoch << 32, 0, v_epoch, {SERVERID}, v_now + INTERVAL ((v_max + 999) DIV 1000) MICROSECOND, v_max);
	DO RELEASE_LOCK({INCLOCK});
END
-- ;;
DROP PROCEDURE IF EXISTS {SESSION}
-- ;;
CREATE PROCEDURE {SESSION}(IN p_id VARBINARY(32), IN p_ttl BIGINT, IN p_create TINYINT)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- session makes (p_create) or renews the session p_id of a fast table's
-- client, to expire p_ttl nanoseconds from now, and returns 1; 0 if the
-- session to renew has expired or is gone (an expired session is never
-- renewed: its holds may have been dropped since); 5 if p_ttl is longer
-- than the grace period covers (RAISE first). Making one deletes the
-- expired ones.
--
-- A hold bound to a session expires no earlier than the session (GRANT
-- and RENEW read the session in the statement that writes the hold), and
-- a renewal extends the session's holds with it: so every rule judges a
-- hold by its expires alone, as without sessions. A renewal extends a
-- hold only if it is live when the statement reaches it: the table is
-- locked for the statement and SYSDATE is read then. (UTC_TIMESTAMP is
-- the statement's start, before it waited for the lock, during which a
-- call may have judged the hold expired and decided on that.) The holds
-- go first, then the session: a session still live then has holds no
-- older than it, which were live a moment before and so were extended.
-- Holds bound in between read the session's old expiry: a third step
-- extends them. Other calls wait for the table while a step runs: about a
-- microsecond per hold.
proc: BEGIN
	DECLARE v_tz VARCHAR(64) DEFAULT NULL;
	DECLARE v_exp, v_new DATETIME(6) DEFAULT NULL;
	DECLARE v_max_ttl BIGINT DEFAULT NULL;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE v_n INT DEFAULT 0;
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		IF v_tz IS NOT NULL THEN SET SESSION time_zone = v_tz; END IF;
		RESIGNAL;
	END;

	SELECT max_ttl, server INTO v_max_ttl, v_srv FROM {STATE} WHERE name = '';
	IF v_max_ttl IS NULL OR v_srv <> {SERVERID} THEN
		IF NOT p_create THEN
			SELECT 0; -- a new incarnation: every session is forgotten
			LEAVE proc;
		END IF;
		CALL {INCARNATE}();
		SET v_max_ttl = NULL;
		SELECT max_ttl INTO v_max_ttl FROM {STATE} WHERE name = '';
	END IF;
	IF p_create THEN
		IF v_max_ttl IS NULL OR p_ttl > v_max_ttl THEN
			SELECT 5;
			LEAVE proc;
		END IF;
		DELETE FROM {SESSIONS} WHERE expires <= UTC_TIMESTAMP(6);
		INSERT INTO {SESSIONS} (id, ttl_ns, expires)
		VALUES (p_id, p_ttl, UTC_TIMESTAMP(6) + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND);
		SELECT 1;
		LEAVE proc;
	END IF;
	-- SYSDATE is in the session's time zone; the tables are in UTC.
	SET v_tz = @@SESSION.time_zone;
	SET SESSION time_zone = '+00:00';
	SELECT expires INTO v_exp FROM {SESSIONS} WHERE id = p_id;
	IF v_exp IS NOT NULL AND v_exp > SYSDATE(6) THEN
		SET v_new = SYSDATE(6) + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
		UPDATE {HOLDS} SET expires = v_new WHERE sid = p_id AND expires > SYSDATE(6) AND expires < v_new;
		UPDATE {SESSIONS} SET expires = v_new WHERE id = p_id AND expires > SYSDATE(6);
		SELECT COUNT(*) INTO v_n FROM {SESSIONS} WHERE id = p_id AND expires = v_new;
		IF v_n = 1 THEN
			UPDATE {HOLDS} SET expires = v_new WHERE sid = p_id AND expires > SYSDATE(6) AND expires < v_new;
		END IF;
	END IF;
	SET SESSION time_zone = v_tz;
	SELECT v_n;
END
-- ;;
DROP PROCEDURE IF EXISTS {RAISE}
-- ;;
CREATE PROCEDURE {RAISE}(IN p_ttl BIGINT, IN p_epoch BIGINT)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- raise records durably, before a lease longer than every lease granted
-- without a flush is granted, that a grace period must last p_ttl; and
-- starts a new epoch, durably, if the epoch is still p_epoch (a name's
-- counter is full: its next token would be in the next epoch's range, and
-- a crash would hand it out again). The marker follows once that is
-- committed. It returns the marker's max_ttl.
BEGIN
	DECLARE v_epoch INT UNSIGNED;
	DECLARE v_max BIGINT;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		RESIGNAL;
	END;
	-- The incarnation starts first: its grace period covers the leases
	-- granted before this raise, not the longer ones it allows.
	IF {FAST} THEN
		SELECT server INTO v_srv FROM {STATE} WHERE name = '';
		IF v_srv IS NULL OR v_srv <> {SERVERID} THEN
			CALL {INCARNATE}();
		END IF;
	END IF;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	SELECT epoch, max_ttl INTO v_epoch, v_max FROM {EPOCHS} WHERE id = 1 FOR UPDATE;
	IF p_ttl > v_max THEN
		SET v_max = p_ttl;
	END IF;
	IF p_epoch >= 0 AND v_epoch <= p_epoch THEN
		SET v_epoch = p_epoch + 1;
	END IF;
	UPDATE {EPOCHS} SET epoch = v_epoch, max_ttl = v_max WHERE id = 1;
	COMMIT;
	UPDATE {STATE}
	   SET max_ttl = GREATEST(max_ttl, v_max), epoch = GREATEST(epoch, v_epoch), seq = GREATEST(seq, v_epoch << 32)
	 WHERE name = '';
	SELECT v_max;
END
-- ;;
DROP PROCEDURE IF EXISTS {TAKE}
-- ;;
CREATE PROCEDURE {TAKE}(
	IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_mode TINYINT, IN p_lim INT,
	IN p_ttl BIGINT, IN p_queue TINYINT, IN p_qttl BIGINT, IN p_host BLOB, IN p_meta BLOB, IN p_long TINYINT,
	IN p_bell VARCHAR(64) CHARACTER SET ascii, IN p_sid VARBINARY(32))
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- take is GRANT for the commonest calls of an exclusive request, with
-- the same arguments and result; p_queue 2 and 3 say which to try (any
-- nonzero p_queue asks to queue, as in GRANT):
-- - a request on a name that nobody holds or waits for, granted under the
--   same locks and conditions as GRANT's uncontended path;
-- - with p_queue 2, a request of an owner without an entry on a name held
--   by another (a Store's first ask on a name it found busy lately),
--   which joins the queue without the name's stripe, in statements on the
--   MEMORY tables, each atomic: the name's holds marked (see RELEASE), a
--   ticket taken, and the entry written only if a live hold is there and
--   nothing has expired. A ticket taken for nothing is only a gap;
--   between a join's ticket and its entry, a hand-off may pass over it
--   (microseconds: fairness, not exclusion, as only calls under the
--   stripe grant);
-- - with p_queue 3, a waiter asking again once woken (the Store holds its
--   bell), which reads the hold RELEASE handed it, without the stripe: a
--   live hold of the owner in the mode, limit, host, metadata and TTL
--   asked for, lasting at least the TTL from now, is reported as
--   extended without a write (GRANT would only extend it).
-- Every other call goes to GRANT. Being small, it costs a CALL less than
-- GRANT does (every variable a CALL declares and every instruction it
-- runs cost it).
proc: BEGIN
	DECLARE v_now, v_expires, v_grace DATETIME(6) DEFAULT NULL;
	DECLARE v_x, v_count, v_rang INT DEFAULT 0;
	DECLARE v_seq, v_floor BIGINT UNSIGNED DEFAULT NULL;
	DECLARE v_epoch INT UNSIGNED DEFAULT 0;
	DECLARE v_max_ttl, v_lwt BIGINT DEFAULT NULL;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		IF v_rang = 1 THEN DO RELEASE_LOCK(p_bell); END IF;
		RESIGNAL;
	END;

	IF {FAST} AND p_mode = 1 AND NOT p_long AND COALESCE(LENGTH(p_meta), 0) <= {METAMAX} AND p_queue = 3 THEN
		SET v_now = UTC_TIMESTAMP(6);
		SELECT h.token, h.created, h.expires, h.sid = p_sid AND p_sid <> '', s.max_ttl, s.server
		  INTO v_seq, v_grace, v_expires, v_x, v_max_ttl, v_srv
		  FROM {HOLDS} h JOIN {STATE} s ON s.name = ''
		 WHERE h.name = p_name AND h.owner = p_owner AND h.queued = 0 AND h.mode = p_mode AND h.lim = p_lim
		   AND h.flags & 3 = 0 AND h.host = p_host AND h.meta <=> p_meta AND h.ttl_ns = p_ttl
		   AND h.expires >= v_now + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
		IF v_seq IS NOT NULL AND v_srv = {SERVERID} AND p_ttl <= v_max_ttl THEN
			SELECT 1, v_seq, {US}v_grace), {US}v_now), {US}v_expires), 0, NULL, 0, 0, v_x << 1;
			LEAVE proc;
		END IF;
		SET v_seq = NULL, v_grace = NULL, v_expires = NULL, v_x = 0, v_max_ttl = NULL, v_srv = NULL;
	END IF;
	IF {FAST} AND p_mode = 1 AND NOT p_long AND COALESCE(LENGTH(p_meta), 0) <= {METAMAX} AND p_queue = 2 THEN
		UPDATE {HOLDS} SET flags = flags | 4 WHERE name = p_name AND queued = 0 AND flags & 4 = 0;
		UPDATE {STATE} SET ticket = LAST_INSERT_ID(ticket + 1) WHERE name = p_name;
		IF ROW_COUNT() = 1 THEN
			SET v_seq = LAST_INSERT_ID(), v_now = UTC_TIMESTAMP(6);
			-- The bell goes up before the entry can exist.
			IF p_bell <> '' THEN
				SELECT COALESCE(GET_LOCK(p_bell, 0), 0) INTO v_rang;
			END IF;
			INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, flags, hold_ttl)
			SELECT p_name, p_owner, 1, p_mode, p_lim, v_seq, p_host, p_meta, p_qttl, v_now, v_now,
			       v_now + INTERVAL ((p_qttl + 999) DIV 1000) MICROSECOND, 0, p_ttl
			  FROM {HOLDS} h WHERE h.name = p_name
			HAVING SUM(h.queued = 0 AND h.expires > v_now) > 0 AND SUM(h.owner = p_owner) = 0 AND SUM(h.expires <= v_now) = 0;
			IF ROW_COUNT() = 1 THEN
				-- The answer, read with the blocker: the entry just ahead,
				-- or else the oldest holder (as a 20-digit token followed
				-- by the owner, so that MIN and MAX pick by token); and the
				-- first holder's expiry. Not the owner's own hold: a
				-- release may have handed it the name by now, and with no
				-- blocker baton asks again at once.
				SELECT 2, 0, 0, {US}v_now), 0,
				       GREATEST(COALESCE(TIMESTAMPDIFF(MICROSECOND, v_now, MIN(IF(queued = 0 AND owner <> p_owner, expires, NULL))), 0), 0) * 1000,
				       SUBSTRING(COALESCE(MAX(IF(queued = 1 AND token < v_seq, CONCAT(LPAD(token, 20, '0'), owner), NULL)),
				                          MIN(IF(queued = 0 AND owner <> p_owner, CONCAT(LPAD(token, 20, '0'), owner), NULL))), 21),
				       COALESCE(MAX(queued = 1 AND token < v_seq), 0),
				       COALESCE(CAST(SUBSTRING(COALESCE(MAX(IF(queued = 1 AND token < v_seq, CONCAT(LPAD(token, 20, '0'), owner), NULL)),
				                                        MIN(IF(queued = 0 AND owner <> p_owner, CONCAT(LPAD(token, 20, '0'), owner), NULL))), 1, 20) AS UNSIGNED), 0),
				       v_rang
				  FROM {HOLDS} WHERE name = p_name AND expires > v_now;
				LEAVE proc;
			END IF;
			IF v_rang = 1 THEN
				DO RELEASE_LOCK(p_bell);
				SET v_rang = 0;
			END IF;
			SET v_seq = NULL, v_now = NULL;
		END IF;
	END IF;
	IF {FAST} AND p_mode = 1 AND NOT p_long AND COALESCE(LENGTH(p_meta), 0) <= {METAMAX} THEN
		{LOCKWAIT}
		SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
		START TRANSACTION;
		lock_name: BEGIN
			-- Locked as GRANT locks it. A name with a counters row (one
			-- InLockedTx may hold), or whose stripe stays locked for a
			-- second, is GRANT's to decide.
			DECLARE EXIT HANDLER FOR 1205 SET v_x = 1;
			SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(p_name) & 65535 FOR UPDATE;
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name;
		END lock_name;
		IF v_x = 0 THEN
			SELECT MAX(IF(name = '', epoch, NULL)), MAX(IF(name = '', grace, NULL)), MAX(IF(name = '', max_ttl, NULL)),
			       MAX(IF(name = '', server, NULL)), MAX(IF(name = '', seq, NULL)), MAX(IF(name = '', NULL, seq)),
			       (SELECT COUNT(*) FROM {HOLDS} WHERE name = p_name)
			  INTO v_epoch, v_grace, v_max_ttl, v_srv, v_floor, v_seq, v_count
			  FROM {STATE} WHERE name IN ('', p_name);
			SET v_now = UTC_TIMESTAMP(6);
			-- GRANT's conditions: the marker of this incarnation, a TTL the
			-- grace period covers, no entries, the grace period over, and
			-- room in the counter (a new name's starts at the floor).
			IF v_srv = {SERVERID} AND p_ttl <= v_max_ttl AND v_count = 0 AND (v_grace IS NULL OR v_now >= v_grace)
			   AND COALESCE(v_seq, v_floor) + 1 < (v_epoch + 1) << 32 THEN
				IF p_bell <> '' THEN
					SELECT COALESCE(GET_LOCK(p_bell, 0), 0) INTO v_rang;
				END IF;
				SET v_expires = v_now + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
				IF v_seq IS NULL THEN
					SET v_seq = v_floor;
					INSERT INTO {STATE} (name, seq, ticket) VALUES (p_name, v_seq + 1, 0);
				ELSE
					UPDATE {STATE} SET seq = v_seq + 1 WHERE name = p_name;
				END IF;
				INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, flags, sid)
				VALUES (p_name, p_owner, 0, p_mode, p_lim, v_seq + 1, p_host, p_meta, p_ttl, v_now, v_now,
				        GREATEST(COALESCE({SESSIONEXP}p_sid), v_expires), v_expires), 0, p_sid);
				COMMIT;
				SET SESSION innodb_lock_wait_timeout = v_lwt;
				SELECT 0, v_seq + 1, {US}v_now), {US}v_now), {US}v_expires), 0, NULL, 0, 0, v_rang | (p_sid <> '') << 1;
				LEAVE proc;
			END IF;
		END IF;
		ROLLBACK;
		SET SESSION innodb_lock_wait_timeout = v_lwt;
	END IF;
	CALL {GRANT}(p_name, p_owner, p_mode, p_lim, p_ttl, p_queue, p_qttl, p_host, p_meta, p_long, p_bell, p_sid);
END
-- ;;
DROP PROCEDURE IF EXISTS {GRANT}
-- ;;
CREATE PROCEDURE {GRANT}(
	IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_mode TINYINT, IN p_lim INT,
	IN p_ttl BIGINT, IN p_queue TINYINT, IN p_qttl BIGINT, IN p_host BLOB, IN p_meta BLOB, IN p_long TINYINT,
	IN p_bell VARCHAR(64) CHARACTER SET ascii, IN p_sid VARBINARY(32))
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- grant applies the grant rules of package lockstate to one request and
-- returns one row: status (0 granted, 1 extended, 2 not granted, 3 the
-- owner holds the name in another mode or with another limit, 4 a shared
-- request whose limit is not the shared holders', 5 p_ttl is longer than
-- the grace period: RAISE it first, 6 the name's counter is full: RAISE
-- the epoch, given as token, first), token,
-- created, renewed, expires (microseconds), after (nanoseconds until the
-- first holder expires, when not granted), when not granted the
-- blocker: the owner, queued flag and token (or ticket) of the entry whose
-- departure the request should wait for, and flags: 1 if the session holds
-- the bell p_bell ('' for none: see the package's bells) after the call, 2
-- if the hold granted or extended is bound to the session p_sid ('' for
-- none: see SESSION). The bell goes up before the entry can exist and is
-- released again if the call leaves no entry. A hold granted is bound to
-- p_sid; a hold extended keeps its binding.
--
-- Every statement that touches a table costs a table open in a stored
-- procedure, so the name's whole state is read by one aggregate over its
-- rows, joined with the request's own live entry (me): a request that is
-- refused again, the commonest call under contention, runs two statements.
proc: BEGIN
	DECLARE v_now, v_created, v_expires, v_first DATETIME(6) DEFAULT NULL;
	DECLARE v_status, v_bqueued TINYINT DEFAULT 0;
	DECLARE v_locked, v_x, v_waited, v_me, v_ok INT DEFAULT 0;
	DECLARE v_seq, v_tick, v_token, v_btoken BIGINT UNSIGNED DEFAULT NULL;
	DECLARE v_after, v_lwt BIGINT DEFAULT NULL;
	DECLARE v_bowner VARBINARY(128) DEFAULT NULL;
	DECLARE v_epoch INT UNSIGNED DEFAULT 0;
	DECLARE v_grace DATETIME(6) DEFAULT NULL;
	DECLARE v_max_ttl BIGINT DEFAULT NULL;
	DECLARE v_srv BINARY(20) DEFAULT NULL;
	DECLARE v_flags TINYINT DEFAULT 0;
	DECLARE v_spill, v_tries, v_count INT DEFAULT 0;
	DECLARE v_floor BIGINT UNSIGNED DEFAULT NULL;
	DECLARE v_rang, v_bound, v_waiting INT DEFAULT 0;
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		IF v_rang = 1 THEN DO RELEASE_LOCK(p_bell); END IF;
		RESIGNAL;
	END;

	IF p_bell <> '' THEN
		SELECT COALESCE(GET_LOCK(p_bell, 0), 0) INTO v_rang;
	END IF;

	IF {FAST} THEN
		SET v_spill = COALESCE(LENGTH(p_meta), 0) > {METAMAX};
		SET v_flags = IF(p_long, 1, 0) | IF(v_spill, 2, 0);
	END IF;

	attempt: LOOP
	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	lock_name: BEGIN
		DECLARE EXIT HANDLER FOR 1205 SET v_locked = 1;
		IF {FAST} THEN
			-- The name's stripe serializes (see {STRIPES}). The name's own
			-- row exists only for InLockedTx (see TXROW), whose transaction
			-- holds it without the stripe: a row that cannot be locked at
			-- once is waited for below, with the stripe let go.
			SELECT id INTO v_x FROM {STRIPES} WHERE id = CRC32(p_name) & 65535 FOR UPDATE;
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name;
			IF v_x = 1 THEN
				SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name FOR UPDATE SKIP LOCKED;
				SET v_locked = 2 * (1 - v_x);
			END IF;
			LEAVE lock_name;
		END IF;
		-- (Not IF EXISTS (SELECT …): a subquery of a stored program's
		-- condition takes a shared lock, and two such transactions deadlock
		-- upgrading it. SELECT … INTO is a plain read, and at READ
		-- COMMITTED, FOR UPDATE on a missing row locks nothing.)
		SELECT seq, ticket INTO v_seq, v_tick FROM {COUNTERS} WHERE name = p_name FOR UPDATE;
		IF v_seq IS NULL THEN
			-- A new name, or one whose row reclaim deleted: its tokens
			-- start above the floor, the largest token of every name whose
			-- row was deleted. (Read after the name's row was found
			-- missing, so after any reclaim that deleted it committed.)
			SELECT seq INTO v_seq FROM {COUNTERS} WHERE name = '';
			INSERT INTO {COUNTERS} (name, seq) VALUES (p_name, COALESCE(v_seq, 0)) ON DUPLICATE KEY UPDATE seq = seq;
			SELECT seq, ticket INTO v_seq, v_tick FROM {COUNTERS} WHERE name = p_name;
		END IF;
	END lock_name;
	IF v_locked = 2 AND v_waited = 0 THEN
		-- A transaction of InLockedTx holds the name: wait for its end (a
		-- second at most) without holding the stripe, which other names
		-- share, then decide again.
		ROLLBACK;
		SET v_waited = 1, v_locked = 0;
		SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
		START TRANSACTION;
		wait_name: BEGIN
			DECLARE EXIT HANDLER FOR 1205 SET v_locked = 1;
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name FOR UPDATE;
		END wait_name;
		ROLLBACK;
		IF v_locked = 0 THEN
			SET SESSION innodb_lock_wait_timeout = v_lwt;
			ITERATE attempt;
		END IF;
	END IF;
	IF {FAST} AND v_locked = 0 THEN
		-- The counters are in {STATE}, read with the marker of the
		-- incarnation (see INCARNATE) and the floor, together with the
		-- number of the name's entries (a name without entries, the
		-- commonest case, needs no aggregate of them).
		SELECT MAX(IF(name = '', epoch, NULL)), MAX(IF(name = '', grace, NULL)), MAX(IF(name = '', max_ttl, NULL)),
		       MAX(IF(name = '', server, NULL)), MAX(IF(name = '', seq, NULL)),
		       MAX(IF(name = '', NULL, seq)), MAX(IF(name = '', NULL, ticket)),
		       (SELECT COUNT(*) FROM {HOLDS} WHERE name = p_name)
		  INTO v_epoch, v_grace, v_max_ttl, v_srv, v_floor, v_seq, v_tick, v_count
		  FROM {STATE} WHERE name IN ('', p_name);
		IF v_max_ttl IS NULL OR v_srv <> {SERVERID} THEN
			ROLLBACK;
			SET SESSION innodb_lock_wait_timeout = v_lwt;
			IF v_tries > 0 THEN
				SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'baton: the incarnation marker is missing';
			END IF;
			SET v_tries = 1;
			CALL {INCARNATE}();
			ITERATE attempt;
		END IF;
		IF p_ttl > v_max_ttl AND NOT p_long THEN
			ROLLBACK;
			SET SESSION innodb_lock_wait_timeout = v_lwt;
			IF v_rang = 1 THEN DO RELEASE_LOCK(p_bell); END IF;
			SELECT 5, 0, 0, 0, 0, 0, NULL, 0, 0, 0;
			LEAVE proc;
		END IF;
		IF v_seq IS NULL THEN
			SET v_seq = v_floor, v_tick = 0;
			INSERT INTO {STATE} (name, seq, ticket) VALUES (p_name, v_seq, 0);
		END IF;
	END IF;
	LEAVE attempt;
	END LOOP attempt;
	IF v_locked <> 0 THEN
		-- The name stayed locked for a second (a fast table: or was locked
		-- again after that second): a transaction of InTx holds it. Not
		-- granted; wait for the holder it took its turn as, whose
		-- committed row is still visible.
		ROLLBACK;
		SET SESSION innodb_lock_wait_timeout = v_lwt;
		SET v_now = UTC_TIMESTAMP(6);
		SELECT owner, queued, token, expires INTO v_bowner, v_bqueued, v_btoken, v_first FROM {HOLDS}
		 WHERE name = p_name AND queued = 0 ORDER BY token LIMIT 1;
		IF v_rang = 1 AND NOT p_queue THEN
			DO RELEASE_LOCK(p_bell);
			SET v_rang = 0;
		END IF;
		SELECT 2, 0, 0, {US}v_now), 0, GREATEST(COALESCE(TIMESTAMPDIFF(MICROSECOND, v_now, v_first), 0), 0) * 1000,
		       v_bowner, v_bqueued, COALESCE(v_btoken, 0), v_rang;
		LEAVE proc;
	END IF;
	SET v_now = UTC_TIMESTAMP(6);
	IF NOT {FAST} THEN
		SET v_count = 1;
	END IF;
	IF v_count = 0 AND (v_grace IS NULL OR v_now >= v_grace) AND v_seq + 1 < (v_epoch + 1) << 32 THEN
		-- Nobody holds the name or waits for it, the grace period is over
		-- and the counter has room: granted below, without the block that
		-- applies the rules to the name's entries. Its variables would cost
		-- this path their initialization (a variable of a block costs each
		-- CALL that enters the block).
		SET v_ok = 1, v_me = -1;
	ELSE
	decide: BEGIN
	DECLARE v_mexp DATETIME(6) DEFAULT NULL;
	DECLARE v_mode, v_dead, v_lean TINYINT DEFAULT 0;
	DECLARE v_lim, v_gone, v_holders, v_ahead, v_excl, v_excl_ahead, v_conflict INT DEFAULT 0;
	DECLARE v_mtoken BIGINT UNSIGNED DEFAULT NULL;
	DECLARE v_pred, v_pred_excl, v_hold_excl, v_hold_old, v_b VARBINARY(160) DEFAULT NULL;
	DECLARE v_msid VARBINARY(32) DEFAULT NULL;
	IF v_count = 0 THEN
		SET v_me = -1;
	ELSE
	IF p_mode = 1 THEN
		-- An exclusive request needs less of the name's state, and the
		-- commonest calls under contention, a request of an owner without
		-- an entry (refused, it joins the queue) and the head of the queue
		-- asking again, get it without joining the entries to the request's
		-- own: the number of holders and of queued entries, the head's
		-- ticket, the queue's tail (the blocker of a request that joins),
		-- the oldest holder and the first expiry. When an entry has
		-- expired, the owner holds the name or waits behind others, the
		-- aggregate below decides instead.
		SELECT COALESCE(SUM(expires <= v_now), 0), COALESCE(MAX(IF(owner = p_owner, queued, NULL)), -1),
		       MAX(IF(owner = p_owner, token, NULL)), MAX(IF(owner = p_owner, expires, NULL)),
		       COALESCE(SUM(queued = 0), 0), COALESCE(SUM(queued = 1), 0), MIN(IF(queued = 1, token, NULL)),
		       MIN(IF(queued = 0, expires, NULL)),
		       MAX(IF(queued = 1, CONCAT(LPAD(token, 20, '0'), owner), NULL)),
		       MIN(IF(queued = 0, CONCAT(LPAD(token, 20, '0'), owner), NULL))
		  INTO v_gone, v_me, v_mtoken, v_mexp, v_holders, v_ahead, v_btoken, v_first, v_pred, v_hold_old
		  FROM {HOLDS} WHERE name = p_name;
		SET v_waiting = v_ahead - (v_me = 1);
		IF v_gone = 0 AND (v_me = -1 OR v_me = 1 AND v_mtoken = v_btoken) THEN
			SET v_lean = 1;
			IF v_me = 1 THEN
				SET v_ahead = 0, v_pred = NULL;
			END IF;
		END IF;
		SET v_btoken = NULL;
	END IF;
	IF NOT v_lean THEN

	-- The name's state with expired entries left out (lockstate drops them
	-- first), the request's own live entry (v_me: -1 none, 0 a hold, 1 a
	-- queue entry), and the candidates for the blocker, as a 20-digit token
	-- followed by the owner so that MIN and MAX pick by token. An entry is
	-- ahead of the request if it is queued with a smaller ticket, or
	-- queued at all when the request is not. For a shared request, a
	-- queued request for another limit counts as exclusive: it keeps the
	-- request out, as lockstate's rules say.
	SELECT COALESCE(SUM(h.expires <= v_now), 0),
	       COALESCE(MAX(me.queued), -1), MAX(me.mode), MAX(me.lim), MAX(me.token), MAX(me.expires), MAX(me.created),
	       COALESCE(SUM(h.expires > v_now AND h.queued = 0), 0),
	       COALESCE(MAX(h.expires > v_now AND h.queued = 0 AND h.mode = 1), 0),
	       COALESCE(SUM(h.expires > v_now AND h.queued = 1 AND (me.queued IS NULL OR me.queued = 0 OR h.token < me.token)), 0),
	       COALESCE(MAX(h.expires > v_now AND h.queued = 1 AND (h.mode = 1 OR h.lim <> p_lim) AND (me.queued IS NULL OR me.queued = 0 OR h.token < me.token)), 0),
	       MIN(IF(h.expires > v_now AND h.queued = 0, h.expires, NULL)),
	       MAX(IF(h.expires > v_now AND h.queued = 1 AND (me.queued IS NULL OR me.queued = 0 OR h.token < me.token),
	              CONCAT(LPAD(h.token, 20, '0'), h.owner), NULL)),
	       MAX(IF(h.expires > v_now AND h.queued = 1 AND (h.mode = 1 OR h.lim <> p_lim) AND (me.queued IS NULL OR me.queued = 0 OR h.token < me.token),
	              CONCAT(LPAD(h.token, 20, '0'), h.owner), NULL)),
	       MAX(IF(h.expires > v_now AND h.queued = 0 AND h.mode = 1, CONCAT(LPAD(h.token, 20, '0'), h.owner), NULL)),
	       MIN(IF(h.expires > v_now AND h.queued = 0, CONCAT(LPAD(h.token, 20, '0'), h.owner), NULL)),
	       COALESCE(MAX(h.expires > v_now AND h.queued = 0 AND h.mode = 2 AND h.lim <> p_lim), 0),
	       MAX(me.sid), COALESCE(MAX(h.owner = p_owner AND h.expires <= v_now), 0),
	       COALESCE(SUM(h.expires > v_now AND h.queued = 1 AND h.owner <> p_owner), 0)
	  INTO v_gone, v_me, v_mode, v_lim, v_mtoken, v_mexp, v_created,
	       v_holders, v_excl, v_ahead, v_excl_ahead, v_first, v_pred, v_pred_excl, v_hold_excl, v_hold_old, v_conflict,
	       v_msid, v_dead, v_waiting
	  FROM {HOLDS} h
	  LEFT JOIN {HOLDS} me ON me.name = h.name AND me.owner = p_owner AND me.expires > v_now
	 WHERE h.name = p_name;
	IF v_gone > 0 THEN
		DELETE FROM {HOLDS} WHERE name = p_name AND expires <= v_now;
		-- A deletion of several rows of a MEMORY table can miss some
		-- (MariaDB 10.11 left one of two), so no decision depends on it;
		-- but the request's own expired entry would meet its INSERT.
		IF v_dead AND ROW_COUNT() < v_gone THEN
			DELETE FROM {HOLDS} WHERE name = p_name AND owner = p_owner AND expires <= v_now;
		END IF;
	END IF;
	END IF;
	END IF;

	IF v_me = 0 THEN
		IF v_mode <> p_mode OR v_lim <> p_lim THEN
			SET v_status = 3, v_created = NULL;
		ELSE
			SET v_expires = v_now + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
			UPDATE {HOLDS} SET ttl_ns = p_ttl, renewed = v_now, expires = GREATEST(COALESCE({SESSIONEXP}sid), v_expires), v_expires), host = p_host,
			       meta = IF(v_spill, NULL, p_meta), flags = v_flags | (flags & 4)
			 WHERE name = p_name AND owner = p_owner;
			SET v_status = 1, v_token = v_mtoken, v_bound = p_sid <> '' AND v_msid = p_sid;
			IF v_flags THEN CALL {KEEP}(p_name, p_owner, v_flags, v_token, p_meta); END IF;
		END IF;
	ELSEIF p_mode = 2 AND v_conflict = 1 THEN
		SET v_status = 4, v_created = NULL;
	ELSE
		SET v_created = NULL;
		IF p_mode = 1 THEN
			SET v_ok = (v_holders = 0 AND v_ahead = 0);
		ELSE
			SET v_ok = (v_excl = 0 AND v_excl_ahead = 0 AND (p_lim = 0 OR v_holders + v_ahead < p_lim));
		END IF;

		IF v_ok AND {FAST} AND v_now < v_grace THEN
			-- A new incarnation's grace period: every hold the server
			-- may have forgotten has not ended yet.
			SET v_ok = 0, v_first = v_grace;
		END IF;
		IF v_ok AND {FAST} AND v_seq + 1 >= (v_epoch + 1) << 32 THEN
			-- The counter would reach the next epoch's tokens, which a
			-- new incarnation would hand out again.
			ROLLBACK;
			SET SESSION innodb_lock_wait_timeout = v_lwt;
			IF v_rang = 1 THEN DO RELEASE_LOCK(p_bell); END IF;
			SELECT 6, v_epoch, 0, 0, 0, 0, NULL, 0, 0, 0;
			LEAVE proc;
		END IF;
		IF NOT v_ok THEN
			SET v_status = 2, v_token = 0;
			IF v_first IS NOT NULL THEN
				SET v_after = TIMESTAMPDIFF(MICROSECOND, v_now, v_first) * 1000;
			END IF;
			-- The blocker: the nearest entry ahead whose departure may let
			-- the request in. Exclusive: the queue entry just ahead, or else
			-- the oldest holder. Shared: the nearest entry ahead that is
			-- exclusive or for another limit,
			-- or else the exclusive holder, or else (a full semaphore) the
			-- oldest holder, or else the queue entry just ahead.
			IF p_mode = 1 AND v_ahead > 0 THEN
				SET v_b = v_pred, v_bqueued = 1;
			ELSEIF p_mode <> 1 AND v_excl_ahead = 1 THEN
				SET v_b = v_pred_excl, v_bqueued = 1;
			ELSEIF p_mode <> 1 AND v_excl = 1 THEN
				SET v_b = v_hold_excl, v_bqueued = 0;
			ELSEIF v_holders > 0 THEN
				SET v_b = v_hold_old, v_bqueued = 0;
			ELSE
				SET v_b = v_pred, v_bqueued = 1;
			END IF;
			IF v_b IS NOT NULL THEN
				SET v_btoken = CAST(SUBSTRING(v_b, 1, 20) AS UNSIGNED), v_bowner = SUBSTRING(v_b, 21);
			END IF;
			IF p_queue THEN
				IF v_me = 1 THEN
					-- Refresh only when half the entry's time is used, so that
					-- a waiter that polls often does not write each time.
					IF TIMESTAMPDIFF(MICROSECOND, v_now, v_mexp) * 1000 < p_qttl DIV 2 THEN
						UPDATE {HOLDS} SET renewed = v_now, expires = v_now + INTERVAL ((p_qttl + 999) DIV 1000) MICROSECOND
						 WHERE name = p_name AND owner = p_owner;
					END IF;
				ELSE
					-- The holds it queues behind are marked first (see RELEASE;
					-- a durable table releases every hold under the lock).
					IF {FAST} THEN
						UPDATE {HOLDS} SET flags = flags | 4 WHERE name = p_name AND queued = 0 AND flags & 4 = 0;
					END IF;
					UPDATE {SEQS} SET ticket = v_tick + 1 WHERE name = p_name;
					INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, flags, hold_ttl)
					VALUES (p_name, p_owner, 1, p_mode, p_lim, v_tick + 1, p_host, IF(v_spill, NULL, p_meta), p_qttl, v_now, v_now,
					        v_now + INTERVAL ((p_qttl + 999) DIV 1000) MICROSECOND, v_flags & 2, IF(v_flags, 0, p_ttl));
					IF v_flags & 2 THEN CALL {KEEP}(p_name, p_owner, v_flags & 2, v_tick + 1, p_meta); END IF;
				END IF;
			END IF;
		END IF;
	END IF;
	END decide;
	END IF;
	IF v_ok THEN
		SET v_token = v_seq + 1, v_created = v_now,
		    v_expires = v_now + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
		UPDATE {SEQS} SET seq = v_token WHERE name = p_name;
		-- Bound to p_sid, it lives as long as the session too: its
		-- expires is read from the session in the statement that
		-- writes it, which no renewal of the session runs within.
		IF v_me = 1 THEN -- leaves the queue
			UPDATE {HOLDS}
			   SET queued = 0, mode = p_mode, lim = p_lim, token = v_token, host = p_host, meta = IF(v_spill, NULL, p_meta),
			       ttl_ns = p_ttl, created = v_now, renewed = v_now, flags = v_flags | IF(v_waiting > 0, 4, 0), sid = p_sid, hold_ttl = 0,
			       expires = GREATEST(COALESCE({SESSIONEXP}p_sid), v_expires), v_expires)
			 WHERE name = p_name AND owner = p_owner;
		ELSE
			INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires, flags, sid)
			VALUES (p_name, p_owner, 0, p_mode, p_lim, v_token, p_host, IF(v_spill, NULL, p_meta), p_ttl, v_now, v_now,
			        GREATEST(COALESCE({SESSIONEXP}p_sid), v_expires), v_expires), v_flags | IF(v_waiting > 0, 4, 0), p_sid);
		END IF;
		SET v_status = 0, v_bound = p_sid <> '';
		IF v_flags THEN CALL {KEEP}(p_name, p_owner, v_flags, v_token, p_meta); END IF;
	END IF;
	COMMIT;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	IF v_rang = 1 AND v_status > 1 AND NOT (v_status = 2 AND p_queue) THEN
		DO RELEASE_LOCK(p_bell);
		SET v_rang = 0;
	END IF;
	SELECT v_status, COALESCE(v_token, 0), COALESCE({US}v_created), 0), {US}v_now), COALESCE({US}v_expires), 0),
	       COALESCE(v_after, 0), v_bowner, v_bqueued, COALESCE(v_btoken, 0), v_rang | v_bound << 1;
END
-- ;;
DROP PROCEDURE IF EXISTS {ACQUIRE}
-- ;;
CREATE PROCEDURE {ACQUIRE}(
	IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_mode TINYINT, IN p_lim INT,
	IN p_ttl BIGINT, IN p_queue TINYINT, IN p_qttl BIGINT, IN p_host BLOB, IN p_meta BLOB, IN p_long TINYINT,
	IN p_bell VARCHAR(64) CHARACTER SET ascii)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- acquire is GRANT without a session, for the processes of the version
-- before sessions that run while the procedures are replaced.
CALL {GRANT}(p_name, p_owner, p_mode, p_lim, p_ttl, p_queue, p_qttl, p_host, p_meta, p_long, p_bell, '')
-- ;;
