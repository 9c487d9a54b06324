-- The general path: the grant rules of package lockstate over native
-- Redis types, so that an operation reads and writes only the entries it
-- concerns: its own, the summary, and the head of the queue.
--
-- The keys of one name, all under its hash tag so that one script may touch
-- them in a cluster:
--
--   <prefix>:{<tag>}:r          HASH   the name's entries and summary
--   <prefix>:{<tag>}:q          ZSET   the queue: owner → ticket (FIFO order)
--   <prefix>:{<tag>}:c          STRING the fencing counter (see next_token in head.lua)
--   <prefix>:{<tag>}:w:<owner>  LIST   a queued owner's mailbox
--
-- The hash holds three kinds of fields, packed with Redis's struct library
-- (big-endian; numbers as doubles, which hold microsecond times exactly):
--
--   n          the name (listings report it; a second name with the same tag is refused)
--   S          the summary: nh nq xq xh t m hm M            ('>IIIIdddd')
--   L          the limit the shared holders took the name with (a number)
--   o:<owner>  the owner's entry: k mode limit token ttl httl created renewed expires, then info ('>BBIdddddd')
--   b:<owner>  the session the owner's hold is bound to, if it is (see session.lua)
--
-- In the summary nh and nq count holders and queue entries, xq the
-- exclusive queue entries and xh the exclusive holders (0 or 1), t is the
-- last queue ticket, m a lower bound of the earliest expiry of any entry,
-- hm a lower bound of the earliest expiry of a holder, and M an upper bound
-- of the latest expiry: the r and q keys expire Linger after M. In an
-- entry, k is 1 for a holder and 2 for a queue entry, whose token is its
-- ticket, whose ttl is its queue TTL and whose httl is the TTL of the hold
-- it asks for; times and TTLs are microseconds of the server's clock
-- (TIME), and info is the caller's host and metadata as JSON, which the
-- scripts never look inside.
--
-- Expired entries are dropped only once the clock has passed m: until then
-- none can have expired. Then one HGETALL drops what expired and computes m
-- and hm anew.
--
-- Grants are handed over by the server: whenever an entry leaves (a
-- release, an expiry noticed, a purge, a waiter giving up), promote grants
-- the queued requests that the rules now let in, in FIFO order, and pushes
-- each grant into its owner's mailbox as '>ddd' (token, time of the grant,
-- expiry), where the owner's BLPOP takes it: a hand-off is one script and
-- one reply, with no round trip of the waiter's own.
--
-- A script includes this after its fast path, if it has one: Lua creates
-- the functions below each time a script runs through their definitions,
-- which a fast path that returns first does not pay for.

-- X is the state of the name a script works on, set by open: its hash
-- and queue keys (X.R, X.Q) and the start of its keys (X.B), the server's time
-- (X.NOW), the summary's fields (X.NH … X.MAX), the hash fields to set (X.W) and
-- delete (X.D), and what happened. One table rather than locals of the
-- chunk: each function's upvalues cost on every call.
local X = {}

local EF = '>BBIdddddd' -- an entry: k mode limit token ttl httl created renewed expires
local SF = '>IIIIdddd'  -- the summary

-- chunked runs cmd on key with the items of list as arguments, at most
-- 1000 at a time (unpack has a limit).
local function chunked(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- sweep drops the entries whose time is up and computes X.MIN and X.HMIN anew;
-- the owners and entries of dropped holders go to gone, if given. A bound
-- hold that expired stays a member of its session: the session's renewal
-- finds it gone and ends the session (see session.lua).
local function sweep(gone)
  local all = redis.call('HGETALL', X.R)
  local zrem, m, hm, bound, kept = {}, 0, 0, {}, {}
  for i = 1, #all, 2 do
    local f = all[i]
    local p = string.sub(f, 1, 2)
    if p == 'b:' then
      bound[#bound + 1] = string.sub(f, 3)
    elseif p == 'o:' then
      local raw = all[i + 1]
      local k, mode, _, _, _, _, _, _, ex = struct.unpack(EF, raw)
      if ex <= X.NOW then
        local o = string.sub(f, 3)
        X.D[#X.D + 1] = f
        if k == 1 then
          X.NH = X.NH - 1
          if mode == 1 then X.XH = 0 end
          if gone then gone[#gone + 1] = o; gone[#gone + 1] = raw end
        else
          X.NQ = X.NQ - 1
          if mode == 1 then X.XQ = X.XQ - 1 end
          zrem[#zrem + 1] = o
        end
      else
        kept[string.sub(f, 3)] = true
        if m == 0 or ex < m then m = ex end
        if k == 1 and (hm == 0 or ex < hm) then hm = ex end
      end
    end
  end
  for _, o in ipairs(bound) do
    if not kept[o] then X.D[#X.D + 1] = 'b:' .. o end
  end
  if #zrem > 0 then chunked('ZREM', X.Q, zrem) end
  X.MIN, X.HMIN, X.DIRTY = m, hm, true
  if #X.D > 0 then X.FREED = true end
end

-- open reads the state of the name whose hash is rkey, drops expired
-- entries if the clock has passed X.MIN, and returns owner's live entry, if
-- owner is given and has one: k, mode, limit, token, ttl, httl, created,
-- renewed, expires, then the raw entry and where its info starts; X.SID is
-- then the session its hold is bound to, if any. With name given, a state
-- of another name sets X.ERR.
local function open(rkey, now, name, owner, gone)
  X.R, X.NOW, X.ERR, X.SID = rkey, now, nil, nil
  X.B = string.sub(rkey, 1, -2)
  X.Q = X.B .. 'q'
  X.W, X.D, X.DIRTY, X.FREED, X.GREW, X.NEWQ = {}, {}, false, false, false, false
  local v
  if owner then
    v = redis.call('HMGET', rkey, 'n', 'S', 'L', 'o:' .. owner, 'b:' .. owner)
  else
    v = redis.call('HMGET', rkey, 'n', 'S', 'L')
  end
  X.L, X.WL = tonumber(v[3]), false
  if name and v[1] and v[1] ~= name then
    X.ERR = 'baton: names ' .. v[1] .. ' and ' .. name .. ' hash to the same key'
    return
  end
  X.NAME, X.FRESH = v[1] or name, not v[1]
  if v[2] then
    X.NH, X.NQ, X.XQ, X.XH, X.T, X.MIN, X.HMIN, X.MAX = struct.unpack(SF, v[2])
  else
    X.NH, X.NQ, X.XQ, X.XH, X.T, X.MIN, X.HMIN, X.MAX = 0, 0, 0, 0, 0, 0, 0, 0
  end
  if X.MIN ~= 0 and now >= X.MIN then sweep(gone) end
  local raw = owner and v[4]
  if raw then
    local k, mode, limit, tok, ttl, httl, cr, rn, ex, pos = struct.unpack(EF, raw)
    if ex > now then
      if k == 1 then X.SID = v[5] or nil end
      return k, mode, limit, tok, ttl, httl, cr, rn, ex, raw, pos
    end
  end
end

-- put writes owner's entry, whose counts the caller has updated, and keeps
-- the bounds: X.MIN and X.HMIN only fall (or are exact when the entry is the
-- only one, or the only holder), X.MAX only grows, and then by the entry's
-- time again, so that a stream of grants moves the keys' expiry now and
-- then, not each time.
local function put(owner, k, mode, limit, tok, ttl, httl, cr, rn, ex, info)
  local n = #X.W
  X.W[n + 1] = 'o:' .. owner
  X.W[n + 2] = struct.pack(EF, k, mode, limit, tok, ttl, httl, cr, rn, ex) .. info
  if X.NH + X.NQ == 1 or ex < X.MIN then X.MIN = ex end
  if k == 1 and (X.NH == 1 or ex < X.HMIN) then X.HMIN = ex end
  if ex > X.MAX then
    X.MAX, X.GREW = ex + (ex - X.NOW), true
  end
  X.DIRTY = true
end

-- drop removes owner's entry (k, mode), and takes its hold out of the
-- session sid it is bound to, if sid is given.
local function drop(owner, k, mode, sid)
  X.D[#X.D + 1] = 'o:' .. owner
  if sid then
    X.D[#X.D + 1] = 'b:' .. owner
    unbind(X.B, owner, sid)
  end
  if k == 1 then
    X.NH = X.NH - 1
    if mode == 1 then X.XH = 0 end
    if X.NH == 0 then X.HMIN = 0 end
  else
    X.NQ = X.NQ - 1
    if mode == 1 then X.XQ = X.XQ - 1 end
    redis.call('ZREM', X.Q, owner)
  end
  if X.NH + X.NQ == 0 then X.MIN = 0 end
  X.DIRTY, X.FREED = true, true
end

-- grant makes owner a holder, with the next token, for ttl+extra µs, or
-- until floor if that is later; it returns the token and the expiry.
local function grant(owner, mode, limit, ttl, extra, info, floor)
  local tok = next_token(X.B .. 'c', X.NOW)
  X.NH = X.NH + 1
  if mode == 1 then
    X.XH = 1
  elseif X.L ~= limit then
    X.L, X.WL = limit, true
  end
  local ex = math.max(X.NOW + ttl + extra, floor or 0)
  put(owner, 1, mode, limit, tok, ttl, 0, X.NOW, X.NOW, ex, info)
  return tok, ex
end

-- hand grants the queued request raw of owner o (taken out of the queue
-- and its counts by the caller) and pushes the grant into o's mailbox as
-- '>ddd' (token, time of the grant, expiry). It lasts a little longer than
-- its TTL (1/20 of it, at least 1ms and at most 50ms): its owner counts
-- its lease from a later moment (see watch.go).
local function hand(o, raw)
  local _, mode, limit, _, qttl, httl, _, _, _, pos = struct.unpack(EF, raw)
  local extra = math.min(math.max(math.floor(httl / 20), 1000), 50000)
  local tok, ex = grant(o, mode, limit, httl, extra, string.sub(raw, pos))
  local mb = X.B .. 'w:' .. o
  redis.call('LPUSH', mb, struct.pack('>ddd', tok, X.NOW, ex))
  redis.call('PEXPIRE', mb, math.ceil(qttl / 1000))
end

-- promote grants the queued requests that may now be granted: the head if
-- it is exclusive and nothing holds, else the run of shared requests of
-- one limit (the holders') up to the first that its limit keeps out
-- (among the first 64: those further back find out by asking).
local function promote()
  if X.NQ == 0 or X.XH == 1 then return end
  if X.NQ == X.XQ then
    -- Only exclusive requests wait: the head goes in if nothing holds.
    if X.NH > 0 then return end
    local o = redis.call('ZPOPMIN', X.Q)[1]
    if not o then return end
    local raw = redis.call('HGET', X.R, 'o:' .. o)
    X.NQ, X.XQ = X.NQ - 1, X.XQ - 1
    if raw then hand(o, raw) end
    return
  end
  local owners = redis.call('ZRANGE', X.Q, 0, 63)
  if #owners == 0 then return end
  local fs = {}
  for j = 1, #owners do fs[j] = 'o:' .. owners[j] end
  local recs = redis.call('HMGET', X.R, unpack(fs))
  local zrem = {}
  for j = 1, #owners do
    local raw = recs[j]
    if raw then
      local _, mode, limit = struct.unpack(EF, raw)
      -- A request for another limit than the holders' is refused to its
      -- owner when it asks, and keeps those behind it out meanwhile.
      if mode == 1 then
        if X.NH == 0 then -- at the head, nothing holds
          zrem[#zrem + 1] = owners[j]
          X.NQ, X.XQ = X.NQ - 1, X.XQ - 1
          hand(owners[j], raw)
        end
        break
      end
      if (limit > 0 and X.NH >= limit) or (X.NH > 0 and X.L and X.L ~= limit) then break end
      zrem[#zrem + 1] = owners[j]
      X.NQ = X.NQ - 1
      hand(owners[j], raw)
    end
  end
  if #zrem > 0 then chunked('ZREM', X.Q, zrem) end
end

-- finish promotes waiters if an entry left, then writes the changes back,
-- or deletes the state when nothing holds or waits (the counter stays).
-- The hash and the queue expire linger ms after X.MAX.
local function finish(linger)
  if X.FREED then promote() end
  if not X.DIRTY then return end
  if X.NH == 0 and X.NQ == 0 then
    if not X.FRESH then redis.call('DEL', X.R, X.Q) end
    return
  end
  if #X.D > 0 then chunked('HDEL', X.R, X.D) end -- before the HSET: a field in both is kept
  local n = #X.W
  X.W[n + 1], X.W[n + 2] = 'S', struct.pack(SF, X.NH, X.NQ, X.XQ, X.XH, X.T, X.MIN, X.HMIN, X.MAX)
  if X.FRESH then X.W[n + 3], X.W[n + 4] = 'n', X.NAME end
  if X.WL then X.W[#X.W + 1], X.W[#X.W + 2] = 'L', X.L end
  redis.call('HSET', X.R, unpack(X.W))
  if X.GREW or X.NEWQ then
    local px = math.max(math.ceil((X.MAX - X.NOW) / 1000) + linger, 1)
    if X.GREW then redis.call('PEXPIRE', X.R, px) end
    if X.NQ > 0 then redis.call('PEXPIRE', X.Q, px) end
  end
end

-- barrier_ahead reports whether one of the first n queue entries keeps a
-- shared request of limit out: it is exclusive, or for another limit.
local function barrier_ahead(n, limit)
  local owners = redis.call('ZRANGE', X.Q, 0, n - 1)
  for i = 1, #owners, 100 do
    local fs = {}
    for j = i, math.min(i + 99, #owners) do fs[#fs + 1] = 'o:' .. owners[j] end
    for _, raw in ipairs(redis.call('HMGET', X.R, unpack(fs))) do
      if raw then
        local _, m, l = struct.unpack(EF, raw)
        if m == 1 or l ~= limit then return true end
      end
    end
  end
  return false
end

-- emit appends the entry raw of owner to out, flat: name, queued, owner,
-- mode, limit, token (0 for queue entries), ttl, created, renewed,
-- expires, info.
local function emit(out, name, owner, raw)
  local k, mode, limit, tok, ttl, _, cr, rn, ex, pos = struct.unpack(EF, raw)
  local queued = 0
  if k == 2 then queued, tok = 1, 0 end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = name, queued, owner, mode, limit, tok
  out[n + 7], out[n + 8], out[n + 9], out[n + 10], out[n + 11] = ttl, cr, rn, ex, string.sub(raw, pos)
end
