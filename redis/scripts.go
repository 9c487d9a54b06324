package redis

import "github.com/redis/go-redis/v9"

// The scripts implement the grant rules of package lockstate on the server.
//
// The state of one name is one string key, <prefix>:{<tag>}:s, holding a
// short text header, "<version> <first expiry> <first holder expiry>;",
// then the MessagePack of {name, holders, queue}. Holders and queue are
// flat arrays of 9 fields per entry,
//
//	owner, mode, limit, token, ttl, created, renewed, expires, info
//
// (flat, because unpacking one table per entry costs more than the rest of
// a script), with times and TTLs in microseconds of the server's clock
// (TIME), token 0 for queue entries, and info the caller's host and
// metadata as JSON (the scripts never look inside it). The queue is kept in
// arrival order, which is the FIFO ticket order of lockstate. The version
// changes with every write (it is at least the time of the write, so it
// does not repeat when a name's state is deleted and made again); the
// header lets a request that was refused, and asks again while nothing
// changed and nothing expired, be refused again without unpacking the
// state.
//
// The name's fencing counter is <prefix>:{<tag>}:c, and the wake-up
// mailbox of a queued owner is <prefix>:{<tag>}:w:<owner>: all keys of a
// name share its hash tag, so one script can touch them all in a cluster.
const prelude = `
if redis.replicate_commands then redis.replicate_commands() end

local F = 9 -- fields per entry

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- decode returns the state in raw (a GET's reply) and its version.
local function decode(raw)
  local v, pos = string.match(raw, '^(%d+) %d+ %d+;()')
  return cmsgpack.unpack(string.sub(raw, pos)), tonumber(v)
end

local function load(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  return decode(raw)
end

-- save writes st back with a new version, which it returns, and a time to
-- live a little beyond its last entry (linger ms); it deletes the key when
-- nothing holds or waits.
local function save(key, st, ver, now, linger)
  local H, Q = st[2], st[3]
  local last, first, hfirst = 0, 0, 0
  for i = 8, #H, F do
    local e = H[i]
    if e > last then last = e end
    if hfirst == 0 or e < hfirst then hfirst = e end
  end
  first = hfirst
  for i = 8, #Q, F do
    local e = Q[i]
    if e > last then last = e end
    if first == 0 or e < first then first = e end
  end
  if last == 0 then
    redis.call('DEL', key)
    return 0
  end
  local px = math.ceil((last - now) / 1000) + linger
  if px < 1 then px = 1 end
  ver = math.max((ver or 0) + 1, now)
  redis.call('SET', key, string.format('%.0f %.0f %.0f;', ver, first, hfirst) .. cmsgpack.pack(st), 'PX', px)
  return ver
end

-- compact drops the entries of A whose time is up, appending their fields
-- to gone if given; it reports whether it dropped any.
local function compact(A, now, gone)
  local n, w = #A, 0
  for r = 1, n, F do
    if now < A[r + 7] then
      if w + 1 ~= r then
        for f = 0, F - 1 do A[w + 1 + f] = A[r + f] end
      end
      w = w + F
    elseif gone then
      for f = 0, F - 1 do gone[#gone + 1] = A[r + f] end
    end
  end
  for i = w + 1, n do A[i] = nil end
  return w ~= n
end

-- expire drops the holders and queue entries whose time is up (the
-- holders' fields go to gone, if given); it reports whether it dropped any.
local function expire(st, now, gone)
  local a = compact(st[2], now, gone)
  local b = compact(st[3], now, nil)
  return a or b
end

-- find returns the index of owner's first field in A, or nil.
local function find(A, owner)
  for r = 1, #A, F do
    if A[r] == owner then return r end
  end
  return nil
end

local function remove(A, r)
  local n = #A
  for i = r, n - F do A[i] = A[i + F] end
  for i = n - F + 1, n do A[i] = nil end
end

local function append(A, owner, mode, limit, token, ttl, created, renewed, expires, info)
  local n = #A
  A[n + 1], A[n + 2], A[n + 3], A[n + 4], A[n + 5] = owner, mode, limit, token, ttl
  A[n + 6], A[n + 7], A[n + 8], A[n + 9] = created, renewed, expires, info
end

-- grantable applies lockstate's rules to a request with ahead queue
-- entries before it.
local function grantable(H, Q, mode, limit, ahead)
  local nh = #H / F
  if mode == 1 then return nh == 0 and ahead == 0 end
  for r = 2, #H, F do
    if H[r] == 1 then return false end
  end
  for j = 0, ahead - 1 do
    if Q[j * F + 2] == 1 then return false end
  end
  return limit == 0 or nh + ahead < limit
end

-- wake pushes a token into the mailbox of every queued owner that could
-- now be granted: the head if it is exclusive, else the run of shared
-- requests up to the first exclusive one, each judged with its own limit.
local function wake(st, key)
  local H, Q = st[2], st[3]
  if #Q == 0 then return end
  for r = 2, #H, F do
    if H[r] == 1 then return end
  end
  local base = string.sub(key, 1, -2) .. 'w:'
  local nh, i = #H / F, 0
  for r = 1, #Q, F do
    local mode, limit = Q[r + 1], Q[r + 2]
    local ok
    if mode == 1 then
      ok = i == 0 and nh == 0
    else
      ok = limit == 0 or nh + i < limit
    end
    if ok then
      local mb = base .. Q[r]
      if redis.call('LPUSH', mb, '1') > 1 then redis.call('LTRIM', mb, 0, 0) end
      redis.call('PEXPIRE', mb, math.ceil(Q[r + 4] / 1000))
    end
    if mode == 1 then break end
    i = i + 1
  end
end

-- emit appends entries of A to out, flat: name, queued, then the fields.
local function emit(out, name, A, queued, owner)
  for r = 1, #A, F do
    if owner == '' or A[r] == owner then
      out[#out + 1] = name
      out[#out + 1] = queued
      for f = 0, F - 1 do out[#out + 1] = A[r + f] end
    end
  end
end
`

// acquireScript: KEYS state, counter; ARGV name, owner, mode, limit, ttl,
// queue (1/0), queue TTL, info, linger, waiting (1/0), extra, and the
// version and queue expiry of this request's previous refusal (empty and 0 if
// none). It returns {1, token, created, renewed, expires, extended} for a
// grant, {0, µs until the first holder expires, version, expiry of the
// request's queue entry} when busy, {-1} on a mode conflict.
//
// With waiting set (a blocked waiter's attempt, sent with its BLPOP; see
// watch.go) it changes nothing unless the owner is queued: it returns {2}
// if the owner holds the name already and {3} if it is not queued, and a
// grant lasts ttl+extra µs, the extra covering the time between the
// waiter's BLPOP and baton's call that takes the grant.
var acquireScript = redis.NewScript(prelude + `
local key, ckey = KEYS[1], KEYS[2]
local name, owner = ARGV[1], ARGV[2]
local mode, limit, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local queue, qttl, info, linger = ARGV[6] == '1', tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
local waiting, extra = ARGV[10] == '1', tonumber(ARGV[11])
local lastver, lastq = ARGV[12], tonumber(ARGV[13])
local now = now_us()
local raw = redis.call('GET', key)
local st, ver
if raw then
  local v, first, hfirst, pos = string.match(raw, '^(%d+) (%d+) (%d+);()')
  if v == lastver and now < tonumber(first) and (not queue or now < lastq - qttl / 2) then
    -- Refused before, and nothing changed or expired since: refused again.
    local after = 0
    if hfirst ~= '0' then after = tonumber(hfirst) - now end
    return {0, after, tonumber(v), lastq}
  end
  st, ver = cmsgpack.unpack(string.sub(raw, pos)), tonumber(v)
  if st[1] ~= name then
    return redis.error_reply('baton: names ' .. st[1] .. ' and ' .. name .. ' hash to the same key')
  end
else
  st = {name, {}, {}}
end
local H, Q = st[2], st[3]
local freed = expire(st, now)
local hr, qr = find(H, owner), find(Q, owner)
if waiting and (hr or not qr) then
  if freed then
    save(key, st, ver, now, linger)
    wake(st, key)
  end
  if hr then return {2} end
  return {3}
end
if hr then
  if H[hr + 1] ~= mode or H[hr + 2] ~= limit then
    if freed then
      save(key, st, ver, now, linger)
      wake(st, key)
    end
    return {-1}
  end
  H[hr + 4], H[hr + 6], H[hr + 7], H[hr + 8] = ttl, now, now + ttl, info
  save(key, st, ver, now, linger)
  if freed then wake(st, key) end
  return {1, H[hr + 3], H[hr + 5], H[hr + 6], H[hr + 7], 1}
end
local ahead = #Q / F
if qr then ahead = (qr - 1) / F end
if grantable(H, Q, mode, limit, ahead) then
  if qr then remove(Q, qr) end
  local token = redis.call('INCR', ckey)
  append(H, owner, mode, limit, token, ttl, now, now, now + ttl + extra, info)
  save(key, st, ver, now, linger)
  if freed then wake(st, key) end
  return {1, token, now, now, now + ttl + extra, 0}
end
local dirty, qexp = freed, 0
if queue then
  if qr then
    -- Refresh only when half the entry's time is used.
    if Q[qr + 7] - now < qttl / 2 then
      Q[qr + 6], Q[qr + 7] = now, now + qttl
      dirty = true
    end
    qexp = Q[qr + 7]
  else
    append(Q, owner, mode, limit, 0, qttl, now, now, now + qttl, info)
    dirty, qexp = true, now + qttl
  end
end
if dirty then
  ver = save(key, st, ver, now, linger)
  if freed then wake(st, key) end
end
local after = 0
for r = 8, #H, F do
  local left = H[r] - now
  if r == 8 or left < after then after = left end
end
return {0, after, ver or 0, qexp}
`)

// renewScript: KEYS state keys; ARGV linger, then owner and TTL per key.
// It returns, per key, {token, created, renewed, expires} or 0.
var renewScript = redis.NewScript(prelude + `
local linger = tonumber(ARGV[1])
local now = now_us()
local out = {}
for i, key in ipairs(KEYS) do
  local owner, ttl = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  local r = 0
  local st, ver = load(key)
  if st then
    local freed = expire(st, now)
    local H = st[2]
    local hr = find(H, owner)
    if hr then
      H[hr + 4], H[hr + 6], H[hr + 7] = ttl, now, now + ttl
      r = {H[hr + 3], H[hr + 5], H[hr + 6], H[hr + 7]}
    end
    if hr or freed then save(key, st, ver, now, linger) end
    if freed then wake(st, key) end
  end
  out[i] = r
end
return out
`)

// releaseScript: KEYS state keys; ARGV linger, then the owner per key. It
// returns, per key, 1 if a hold was released, else 0.
var releaseScript = redis.NewScript(prelude + `
local linger = tonumber(ARGV[1])
local now = now_us()
local out = {}
for i, key in ipairs(KEYS) do
  local owner = ARGV[i + 1]
  local r = 0
  local st, ver = load(key)
  if st then
    local freed = expire(st, now)
    local qr = find(st[3], owner)
    if qr then
      remove(st[3], qr)
      freed = true
    end
    local hr = find(st[2], owner)
    if hr then
      remove(st[2], hr)
      freed = true
      r = 1
    end
    if freed then
      save(key, st, ver, now, linger)
      wake(st, key)
    end
  end
  out[i] = r
end
return out
`)

// listScript: KEYS state keys; ARGV name prefix, owner (empty for any),
// queued (1/0). It returns {now, entries...}, flat (see emit).
var listScript = redis.NewScript(prelude + `
local prefix, owner, queued = ARGV[1], ARGV[2], ARGV[3] == '1'
local now = now_us()
local out = {now}
for _, key in ipairs(KEYS) do
  local st = load(key)
  if st and string.sub(st[1], 1, #prefix) == prefix then
    emit(out, st[1], st[2], 0, owner)
    if queued then emit(out, st[1], st[3], 1, owner) end
  end
end
return out
`)

// purgeScript: KEYS state keys; ARGV linger. It drops expired entries and
// returns {now, expired holders...}, flat (see emit).
var purgeScript = redis.NewScript(prelude + `
local linger = tonumber(ARGV[1])
local now = now_us()
local out = {now}
for _, key in ipairs(KEYS) do
  local st, ver = load(key)
  if st then
    local gone = {}
    if expire(st, now, gone) then
      save(key, st, ver, now, linger)
      wake(st, key)
    end
    emit(out, st[1], gone, 0, '')
  end
end
return out
`)

// markScript: KEYS the waiter's mailbox (only to route the call). It
// returns the server's time in µs, taken just before the waiter's BLPOP
// (on a cluster, where a TIME command could go to another node).
var markScript = redis.NewScript(`
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
`)

// pokeScript: KEYS state, mailbox; ARGV owner, linger. It takes the owner
// out of the queue (its Lock is over) and pushes a token into its mailbox,
// to end the BLPOP blocked there: the attempt queued behind that BLPOP then
// finds the owner not queued, and changes nothing.
var pokeScript = redis.NewScript(prelude + `
local key, mb, owner, linger = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local now = now_us()
local st, ver = load(key)
if st then
  local freed = expire(st, now)
  local qr = find(st[3], owner)
  if qr then
    remove(st[3], qr)
    freed = true
  end
  if freed then
    save(key, st, ver, now, linger)
    wake(st, key)
  end
end
redis.call('LPUSH', mb, '0')
redis.call('PEXPIRE', mb, 1000)
return 1
`)
