
CREATE TABLE IF NOT EXISTS {COUNTERS} (
	name   VARBINARY(255) NOT NULL,
	seq    BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'last fencing token handed out',
	ticket BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'last queue ticket handed out',
	PRIMARY KEY (name)
) ENGINE=InnoDB COMMENT='baton mysql store: fencing and queue counters, one row per lock name, never deleted'
-- ;;
CREATE TABLE IF NOT EXISTS {HOLDS} (
	name    VARBINARY(255) NOT NULL,
	owner   VARBINARY(128) NOT NULL,
	queued  TINYINT NOT NULL COMMENT '1: a queue entry, not a hold',
	mode    TINYINT NOT NULL COMMENT '1 exclusive, 2 shared',
	lim     INT NOT NULL COMMENT 'semaphore limit, 0 for none',
	token   BIGINT UNSIGNED NOT NULL COMMENT 'fencing token, or queue ticket',
	host    BLOB NOT NULL,
	meta    BLOB NULL COMMENT 'JSON object',
	ttl_ns  BIGINT NOT NULL,
	created DATETIME(6) NOT NULL COMMENT 'UTC',
	renewed DATETIME(6) NOT NULL COMMENT 'UTC',
	expires DATETIME(6) NOT NULL COMMENT 'UTC',
	PRIMARY KEY (name, owner),
	KEY owner_ix (owner)
) ENGINE=InnoDB COMMENT='baton mysql store: holds and queue entries'
-- ;;
DROP PROCEDURE IF EXISTS {ACQUIRE}
-- ;;
CREATE PROCEDURE {ACQUIRE}(
	IN p_name VARBINARY(255), IN p_owner VARBINARY(128), IN p_mode TINYINT, IN p_lim INT,
	IN p_ttl BIGINT, IN p_queue TINYINT, IN p_qttl BIGINT, IN p_host BLOB, IN p_meta BLOB)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- acquire applies the grant rules of package lockstate to one request and
-- returns one row: status (0 granted, 1 extended, 2 not granted, 3 the
-- owner holds the name in another mode or with another limit, 4 a shared
-- request whose limit is not the shared holders'), token,
-- created, renewed, expires (microseconds), after (nanoseconds until the
-- first holder expires, when not granted) and, when not granted, the
-- blocker: the owner, queued flag and token (or ticket) of the entry whose
-- departure the request should wait for.
--
-- Every statement that touches a table costs a table open in a stored
-- procedure, so the name's whole state is read by one aggregate over its
-- rows, joined with the request's own live entry (me): a request that is
-- refused again, the commonest call under contention, runs two statements.
proc: BEGIN
	DECLARE v_now, v_created, v_expires, v_mexp, v_first DATETIME(6) DEFAULT NULL;
	DECLARE v_status, v_mode, v_bqueued TINYINT DEFAULT 0;
	DECLARE v_me, v_lim, v_gone, v_holders, v_ahead, v_excl, v_excl_ahead, v_ok, v_locked, v_conflict INT DEFAULT 0;
	DECLARE v_seq, v_tick, v_token, v_mtoken, v_btoken BIGINT UNSIGNED DEFAULT NULL;
	DECLARE v_after, v_lwt BIGINT DEFAULT NULL;
	DECLARE v_bowner VARBINARY(128) DEFAULT NULL;
	DECLARE v_pred, v_pred_excl, v_hold_excl, v_hold_old, v_b VARBINARY(160) DEFAULT NULL;
	DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	lock_name: BEGIN
		DECLARE EXIT HANDLER FOR 1205 SET v_locked = 1;
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
	IF v_locked = 1 THEN
		-- The name stayed locked for a second: a transaction of InTx holds
		-- it. Not granted; wait for the holder it took its turn as, whose
		-- committed row is still visible.
		ROLLBACK;
		SET SESSION innodb_lock_wait_timeout = v_lwt;
		SET v_now = UTC_TIMESTAMP(6);
		SELECT owner, queued, token, expires INTO v_bowner, v_bqueued, v_btoken, v_first FROM {HOLDS}
		 WHERE name = p_name AND queued = 0 ORDER BY token LIMIT 1;
		SELECT 2, 0, 0, {US}v_now), 0, GREATEST(COALESCE(TIMESTAMPDIFF(MICROSECOND, v_now, v_first), 0), 0) * 1000,
		       v_bowner, v_bqueued, COALESCE(v_btoken, 0);
		LEAVE proc;
	END IF;
	SET v_now = UTC_TIMESTAMP(6);

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
	       COALESCE(MAX(h.expires > v_now AND h.queued = 0 AND h.mode = 2 AND h.lim <> p_lim), 0)
	  INTO v_gone, v_me, v_mode, v_lim, v_mtoken, v_mexp, v_created,
	       v_holders, v_excl, v_ahead, v_excl_ahead, v_first, v_pred, v_pred_excl, v_hold_excl, v_hold_old, v_conflict
	  FROM {HOLDS} h
	  LEFT JOIN {HOLDS} me ON me.name = h.name AND me.owner = p_owner AND me.expires > v_now
	 WHERE h.name = p_name;
	IF v_gone > 0 THEN
		DELETE FROM {HOLDS} WHERE name = p_name AND expires <= v_now;
	END IF;

	IF v_me = 0 THEN
		IF v_mode <> p_mode OR v_lim <> p_lim THEN
			SET v_status = 3, v_created = NULL;
		ELSE
			SET v_expires = v_now + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
			UPDATE {HOLDS} SET ttl_ns = p_ttl, renewed = v_now, expires = v_expires, host = p_host, meta = p_meta
			 WHERE name = p_name AND owner = p_owner;
			SET v_status = 1, v_token = v_mtoken;
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

		IF v_ok THEN
			SET v_token = v_seq + 1, v_created = v_now,
			    v_expires = v_now + INTERVAL ((p_ttl + 999) DIV 1000) MICROSECOND;
			UPDATE {COUNTERS} SET seq = v_token WHERE name = p_name;
			IF v_me = 1 THEN -- leaves the queue
				UPDATE {HOLDS}
				   SET queued = 0, mode = p_mode, lim = p_lim, token = v_token, host = p_host, meta = p_meta,
				       ttl_ns = p_ttl, created = v_now, renewed = v_now, expires = v_expires
				 WHERE name = p_name AND owner = p_owner;
			ELSE
				INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires)
				VALUES (p_name, p_owner, 0, p_mode, p_lim, v_token, p_host, p_meta, p_ttl, v_now, v_now, v_expires);
			END IF;
			SET v_status = 0;
		ELSE
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
					UPDATE {COUNTERS} SET ticket = v_tick + 1 WHERE name = p_name;
					INSERT INTO {HOLDS} (name, owner, queued, mode, lim, token, host, meta, ttl_ns, created, renewed, expires)
					VALUES (p_name, p_owner, 1, p_mode, p_lim, v_tick + 1, p_host, p_meta, p_qttl, v_now, v_now,
					        v_now + INTERVAL ((p_qttl + 999) DIV 1000) MICROSECOND);
				END IF;
			END IF;
		END IF;
	END IF;
	COMMIT;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	SELECT v_status, COALESCE(v_token, 0), COALESCE({US}v_created), 0), {US}v_now), COALESCE({US}v_expires), 0),
	       COALESCE(v_after, 0), v_bowner, v_bqueued, COALESCE(v_btoken, 0);
END
-- ;;
DROP PROCEDURE IF EXISTS {RENEW}
-- ;;
CREATE PROCEDURE {RENEW}(IN p_holds LONGTEXT CHARACTER SET utf8mb4)
MODIFIES SQL DATA SQL SECURITY INVOKER
COMMENT '{VERSION}'
-- renew extends the live holds of a JSON array of [hex name, hex owner,
-- TTL in nanoseconds] and returns "i,token,created,renewed,expires;" for
-- each hold renewed (i counts from 1). Holds that are not live are skipped
-- without locking their name.
BEGIN
	DECLARE v_done, v_i, v_n, v_x, v_single INT DEFAULT 0;
	DECLARE v_name VARBINARY(255);
	DECLARE v_owner VARBINARY(128);
	DECLARE v_ttl BIGINT;
	DECLARE v_token BIGINT UNSIGNED;
	DECLARE v_now, v_created, v_expires DATETIME(6);
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE v_out LONGTEXT CHARACTER SET ascii DEFAULT '';
	DECLARE cur CURSOR FOR
		SELECT j.i, UNHEX(j.n), UNHEX(j.o), j.t
		  FROM JSON_TABLE(p_holds, '$[*]' COLUMNS (
		         i FOR ORDINALITY,
		         n VARCHAR(510) CHARACTER SET ascii PATH '$[0]',
		         o VARCHAR(256) CHARACTER SET ascii PATH '$[1]',
		         t BIGINT PATH '$[2]')) AS j
		 WHERE EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = UNHEX(j.n) AND e.owner = UNHEX(j.o) AND e.queued = 0
		                  AND e.expires > UTC_TIMESTAMP(6))
		 ORDER BY UNHEX(j.n), j.i;
	DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	-- One hold (a lease's own renewal) needs no cursor, which costs a
	-- temporary table.
	SET v_single = JSON_LENGTH(p_holds) = 1;
	IF v_single THEN
		SET v_name = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_holds, '$[0][0]'))),
		    v_owner = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(p_holds, '$[0][1]'))),
		    v_ttl = JSON_EXTRACT(p_holds, '$[0][2]');
	ELSE
		OPEN cur;
	END IF;
	renew_loop: LOOP
		IF v_single THEN
			IF v_i = 1 THEN
				LEAVE renew_loop;
			END IF;
			SET v_i = 1;
			SELECT COUNT(*) INTO v_x FROM {HOLDS}
			 WHERE name = v_name AND owner = v_owner AND queued = 0 AND expires > UTC_TIMESTAMP(6);
			IF v_x = 0 THEN
				LEAVE renew_loop;
			END IF;
		ELSE
			FETCH cur INTO v_i, v_name, v_owner, v_ttl;
			IF v_done THEN
				LEAVE renew_loop;
			END IF;
		END IF;
		SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
		SET v_now = UTC_TIMESTAMP(6);
		DELETE FROM {HOLDS} WHERE name = v_name AND expires <= v_now;
		SELECT COUNT(*), COALESCE(MAX(token), 0), MAX(created) INTO v_n, v_token, v_created
		  FROM {HOLDS} WHERE name = v_name AND owner = v_owner AND queued = 0;
		IF v_n = 1 THEN
			SET v_expires = v_now + INTERVAL ((v_ttl + 999) DIV 1000) MICROSECOND;
			UPDATE {HOLDS} SET ttl_ns = v_ttl, renewed = v_now, expires = v_expires
			 WHERE name = v_name AND owner = v_owner;
			SET v_out = CONCAT(v_out, v_i, ',', v_token, ',', {US}v_created), ',', {US}v_now), ',',
			                   {US}v_expires), ';');
		END IF;
	END LOOP;
	IF NOT v_single THEN
		CLOSE cur;
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
-- commit on the name's row lock, so it never finds the entry still there.
BEGIN
	DECLARE v_done, v_i, v_n, v_x, v_single INT DEFAULT 0;
	DECLARE v_q TINYINT DEFAULT 0;
	DECLARE v_name VARBINARY(255);
	DECLARE v_owner VARBINARY(128);
	DECLARE v_bell VARCHAR(64) CHARACTER SET ascii DEFAULT '';
	DECLARE v_now DATETIME(6);
	DECLARE v_lwt BIGINT DEFAULT NULL;
	DECLARE v_out LONGTEXT CHARACTER SET ascii DEFAULT '';
	DECLARE cur CURSOR FOR
		SELECT j.i, UNHEX(j.n), UNHEX(j.o)
		  FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (
		         i FOR ORDINALITY,
		         n VARCHAR(510) CHARACTER SET ascii PATH '$[0]',
		         o VARCHAR(256) CHARACTER SET ascii PATH '$[1]')) AS j
		 WHERE EXISTS (SELECT 1 FROM {HOLDS} e
		                WHERE e.name = UNHEX(j.n) AND e.owner = UNHEX(j.o) AND e.expires > UTC_TIMESTAMP(6))
		 ORDER BY UNHEX(j.n), j.i;
	DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
		ROLLBACK;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	{LOCKWAIT}
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	-- One key (a lease's own release) needs no cursor, which costs a
	-- temporary table.
	SET v_single = JSON_LENGTH(p_keys) = 1;
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
			SELECT COUNT(*) INTO v_x FROM {HOLDS}
			 WHERE name = v_name AND owner = v_owner AND expires > UTC_TIMESTAMP(6);
			IF v_x = 0 THEN
				LEAVE release_loop;
			END IF;
		ELSE
			FETCH cur INTO v_i, v_name, v_owner;
			IF v_done THEN
				LEAVE release_loop;
			END IF;
		END IF;
		SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
		SET v_now = UTC_TIMESTAMP(6);
		SELECT COUNT(*), COALESCE(MAX(queued), 1) INTO v_n, v_q
		  FROM {HOLDS} WHERE name = v_name AND owner = v_owner AND expires > v_now;
		-- The entry, and the name's expired ones (lockstate drops them first).
		DELETE FROM {HOLDS} WHERE name = v_name AND (owner = v_owner OR expires <= v_now);
		IF v_n = 1 THEN
			SET v_out = CONCAT(v_out, v_i, ',', 1 - v_q, ';');
		END IF;
	END LOOP;
	IF v_single THEN
		IF v_bell <> '' THEN
			DO RELEASE_LOCK(v_bell);
		END IF;
	ELSE
		CLOSE cur;
		SELECT COUNT(RELEASE_LOCK(j.b)) INTO v_x
		  FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (b VARCHAR(64) CHARACTER SET ascii PATH '$[2]')) AS j
		 WHERE j.b <> '';
	END IF;
	COMMIT;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	SELECT v_out;
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
			SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = v_name FOR UPDATE;
		END lock_name;
		IF v_locked = 1 THEN -- held by a transaction of InTx: its holds are live
			ROLLBACK;
		ELSE
			SET v_now = UTC_TIMESTAMP(6);
			SELECT name, owner, mode, lim, token, host, meta, ttl_ns,
			       {US}created), {US}renewed), {US}expires), {US}v_now)
			  FROM {HOLDS} WHERE name = v_name AND expires <= v_now AND queued = 0;
			DELETE FROM {HOLDS} WHERE name = v_name AND expires <= v_now;
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
BEGIN
	DECLARE v_x INT DEFAULT 0;
	SELECT COUNT(*) INTO v_x FROM {COUNTERS} WHERE name = p_name FOR UPDATE;
	DELETE FROM {HOLDS}
	 WHERE name = p_name AND owner = p_owner AND queued = 0 AND token = p_token
	   AND expires > UTC_TIMESTAMP(6);
	SELECT ROW_COUNT();
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
		DROP TEMPORARY TABLE IF EXISTS {RECLAIM}_idle, {RECLAIM}_gone;
		IF v_lwt IS NOT NULL THEN SET SESSION innodb_lock_wait_timeout = v_lwt; END IF;
		RESIGNAL;
	END;

	{LOCKWAIT}
	-- (Created outside the transaction: servers that enforce GTID
	-- consistency refuse it inside one.)
	DROP TEMPORARY TABLE IF EXISTS {RECLAIM}_idle, {RECLAIM}_gone;
	CREATE TEMPORARY TABLE {RECLAIM}_idle (
		name   VARBINARY(255) NOT NULL PRIMARY KEY,
		seq    BIGINT UNSIGNED NOT NULL,
		ticket BIGINT UNSIGNED NOT NULL
	);
	CREATE TEMPORARY TABLE {RECLAIM}_gone LIKE {RECLAIM}_idle;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	INSERT INTO {COUNTERS} (name) VALUES ('') ON DUPLICATE KEY UPDATE seq = seq;
	SELECT ticket INTO v_last FROM {COUNTERS} WHERE name = '' FOR UPDATE;
	SET v_now = {US}UTC_TIMESTAMP(6));
	IF v_last > v_now - p_every AND v_last <= v_now THEN
		ROLLBACK;
		DROP TEMPORARY TABLE {RECLAIM}_idle, {RECLAIM}_gone;
		SET SESSION innodb_lock_wait_timeout = v_lwt;
		SELECT -1;
		LEAVE proc;
	END IF;
	-- The idle names, read together with their holds.
	INSERT INTO {RECLAIM}_idle (name, seq, ticket)
	SELECT c.name, c.seq, c.ticket FROM {COUNTERS} c
	 WHERE c.name <> '' AND NOT EXISTS (SELECT 1 FROM {HOLDS} h WHERE h.name = c.name);
	-- Their rows, locked, if their counters are unchanged since: every hold
	-- or queue entry comes with a new token or ticket, so such a name
	-- gained none. A row another transaction has locked (a call deciding
	-- about the name, a transaction of InLockedTx) is skipped, not waited
	-- for.
	INSERT INTO {RECLAIM}_gone (name, seq, ticket)
	SELECT c.name, c.seq, c.ticket FROM {COUNTERS} c
	  JOIN {RECLAIM}_idle i ON i.name = c.name AND i.seq = c.seq AND i.ticket = c.ticket
	   FOR UPDATE SKIP LOCKED;
	DELETE c FROM {COUNTERS} c JOIN {RECLAIM}_gone g ON g.name = c.name;
	SET v_n = ROW_COUNT();
	SELECT COALESCE(MAX(seq), 0) INTO v_max FROM {RECLAIM}_gone;
	UPDATE {COUNTERS} SET seq = GREATEST(seq, v_max), ticket = v_now WHERE name = '';
	COMMIT;
	DROP TEMPORARY TABLE {RECLAIM}_idle, {RECLAIM}_gone;
	SET SESSION innodb_lock_wait_timeout = v_lwt;
	SELECT v_n;
END
