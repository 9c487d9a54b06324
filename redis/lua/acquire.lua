-- acquire: KEYS hash, queue, counter, and the session to bind a grant
-- to, if any; ARGV name, owner, then mode, limit, ttl, queue (1/0), queue
-- TTL and linger packed as six big-endian doubles (see acquireArgs), then
-- info, then the session's id ('' for none). It returns {1, token,
-- created, renewed, expires, extended, bound} for a grant, {0, µs until
-- the first holder expires (0: unknown), the server's time} when busy,
-- {-1} on a mode conflict, {-2} on a limit conflict. A request that joins
-- the queue empties its owner's mailbox, so that a grant left there for an
-- earlier request of the same owner is not taken for one of this request.
--
-- A new hold is bound to the session if the session is live: it lasts
-- until the later of its TTL and the session's expiry, and the session's
-- renewals extend it (session.lua). A hold extended keeps the session it
-- had, if any, and bound says whether that is the one asked for.

-- #include head
local owner, info, sid = ARGV[2], ARGV[4], ARGV[5]
local mode, limit, ttl, queue, qttl, linger = struct.unpack('>dddddd', ARGV[3])

-- The fast path: the name has no state, so nobody holds it or waits for
-- it, and the request is granted, in any mode. It writes what the general
-- path below writes for such a grant (open finds nothing, grant and
-- finish), field for field, without the cost of defining the general
-- path's functions.
if redis.call('EXISTS', KEYS[1]) == 0 then
  local now = now_us()
  local tok, ex = next_token(KEYS[3], now), now + ttl
  local se = sid ~= '' and session_live(KEYS[4], now)
  if se and se > ex then ex = se end
  local xh = 0
  if mode == 1 then xh = 1 end
  -- One holder; the bounds m and hm are its expiry, and M twice as far (see put).
  local e = struct.pack('>BBIdddddd', 1, mode, limit, tok, ttl, 0, now, now, ex) .. info
  local s = struct.pack('>IIIIdddd', 1, 0, 0, xh, 0, ex, ex, 2 * ex - now)
  local f = {'o:' .. owner, e, 'S', s, 'n', ARGV[1]}
  if mode ~= 1 then f[7], f[8] = 'L', limit end
  if se then
    f[#f + 1], f[#f + 2] = 'b:' .. owner, sid
    bind(KEYS[4], string.sub(KEYS[1], 1, -2), owner)
  end
  redis.call('HSET', KEYS[1], unpack(f))
  redis.call('PEXPIRE', KEYS[1], math.max(math.ceil(2 * (ex - now) / 1000) + linger, 1))
  return {1, tok, now, now, ex, 0, se and 1 or 0}
end

-- The second fast path: an exclusive request of an owner with no entry
-- joins the queue of a name that others hold or wait for, and no entry can
-- have expired. It writes what the general path writes then (open, the
-- queue's branch and finish), field for field.
if mode == 1 and queue == 1 then
  local v = redis.call('HMGET', KEYS[1], 'n', 'S', 'o:' .. owner)
  if v[1] == ARGV[1] and v[2] and not v[3] then
    local nh, nq, xq, xh, t, m, hm, mx = struct.unpack('>IIIIdddd', v[2])
    local now = now_us()
    if now < m and nh + nq > 0 then
      local b, mx0, ex = string.sub(KEYS[1], 1, -2), mx, now + qttl
      t, nq, xq = t + 1, nq + 1, xq + 1
      if ex < m then m = ex end
      if ex > mx then mx = ex + (ex - now) end
      redis.call('ZADD', KEYS[2], t, owner)
      redis.call('DEL', b .. 'w:' .. owner)
      redis.call('HSET', KEYS[1], 'o:' .. owner, struct.pack('>BBIdddddd', 2, 1, limit, t, qttl, ttl, now, now, ex) .. info,
        'S', struct.pack('>IIIIdddd', nh, nq, xq, xh, t, m, hm, mx))
      if mx ~= mx0 or nq == 1 then
        local px = math.max(math.ceil((mx - now) / 1000) + linger, 1)
        if mx ~= mx0 then redis.call('PEXPIRE', KEYS[1], px) end
        redis.call('PEXPIRE', KEYS[2], px)
      end
      local after = 0
      if nh > 0 and hm > now then after = hm - now end
      return {0, after, now}
    end
  end
end

-- #include prelude

local k, emode, elimit, etok, ettl, ehttl, ecr, _, eex, raw, pos = open(KEYS[1], now_us(), ARGV[1], owner)
if X.ERR then return redis.error_reply(X.ERR) end
if k == 1 then
  if emode ~= mode or elimit ~= limit then
    finish(linger)
    return {-1}
  end
  local ex = X.NOW + ttl
  local se = X.SID and session_live(session_key(X.B, X.SID), X.NOW)
  if se and se > ex then ex = se end
  put(owner, 1, mode, limit, etok, ttl, 0, ecr, X.NOW, ex, info)
  finish(linger)
  return {1, etok, ecr, X.NOW, ex, 1, (sid ~= '' and X.SID == sid) and 1 or 0}
end
if mode == 2 and X.NH > 0 and X.XH == 0 and X.L and X.L ~= limit then
  finish(linger)
  return {-2}
end
local queued = k == 2
local ahead = X.NQ
if queued then ahead = redis.call('ZRANK', X.Q, owner) end
local ok
if mode == 1 then
  ok = X.NH == 0 and ahead == 0
elseif X.XH == 1 then
  ok = false
else
  ok = (limit == 0 or X.NH + ahead < limit) and not (ahead > 0 and barrier_ahead(ahead, limit))
end
if ok then
  if queued then
    redis.call('ZREM', X.Q, owner)
    X.NQ = X.NQ - 1
    if emode == 1 then X.XQ = X.XQ - 1 end
    X.FREED = true -- the entries behind it move up
  end
  local se = sid ~= '' and session_live(KEYS[4], X.NOW)
  local tok, ex = grant(owner, mode, limit, ttl, 0, info, se)
  if se then
    X.W[#X.W + 1], X.W[#X.W + 2] = 'b:' .. owner, sid
    bind(KEYS[4], X.B, owner)
  end
  finish(linger)
  return {1, tok, X.NOW, X.NOW, ex, 0, se and 1 or 0}
end
if queue == 1 then
  if queued then
    -- Refresh only when half the entry's time is used.
    if eex - X.NOW < qttl / 2 then
      put(owner, 2, emode, elimit, etok, ettl, ehttl, ecr, X.NOW, X.NOW + qttl, string.sub(raw, pos))
    end
  else
    X.T = X.T + 1
    if X.NQ == 0 then X.NEWQ = true end
    X.NQ = X.NQ + 1
    if mode == 1 then X.XQ = X.XQ + 1 end
    redis.call('ZADD', X.Q, X.T, owner)
    redis.call('DEL', X.B .. 'w:' .. owner)
    put(owner, 2, mode, limit, X.T, qttl, ttl, X.NOW, X.NOW, X.NOW + qttl, info)
  end
end
finish(linger)
local after = 0
if X.NH > 0 and X.HMIN > X.NOW then after = X.HMIN - X.NOW end
return {0, after, X.NOW}
