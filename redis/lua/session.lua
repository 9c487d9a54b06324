-- session: a Store's session (package driver/sessions) and its renewal.
-- KEYS the session's hash; ARGV the start of the names' keys
-- ("<prefix>:{"), linger, the session's id, its TTL (µs), then what to
-- do: 'new' makes the session; 'renew' renews it and extends the first of
-- its holds; a cursor that a call returned extends the next ones. A
-- renewal also takes the bindings and unbindings the client saw the
-- server count (ARGV[6], ARGV[7]). It returns {1, the cursor of the holds
-- left to extend ('0' when none is), the number of fields of the session},
-- or {0} when the session is not live or ended now.
--
-- The session's hash (see head.lua): e its expiry (µs of the server's
-- clock), u the unbindings counted, and a field m:<tag><owner> per hold
-- bound to it: only an unbinding takes a member out, so the bindings
-- counted are the members plus u. It expires with e. A hold bound to
-- the session (its name's hash says so in b:<owner>) lasts until the
-- later of its own expiry and the session's: every script that writes its
-- expiry reads the session's, and a renewal of the session extends the
-- hold in the walk that follows it. A hold bound in between reads the new
-- expiry. So every rule judges a hold by its own entry, as without
-- sessions.
--
-- A session is renewed only while live, and its holds only while live
-- and bound to it: nothing expired is revived. A session ends, never to
-- be renewed again, when it has lost a hold it should have kept (the walk
-- finds a member whose hold is gone or expired), or when the client saw
-- more bindings or unbindings than it has: the server lost writes (a
-- restart from an append-only file a second behind, a failover to a
-- replica behind), and a hold of the client's may be missing from it, or
-- a hold it released back in it.

-- #include head

local x, start, linger, sid, ttl, op = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local now = now_us()
if op == 'new' then
  redis.call('HSET', x, 'e', string.format('%.0f', now + ttl), 'u', 0)
  redis.call('PEXPIRE', x, math.ceil(ttl / 1000) + 1)
  return {1, '0', 2}
end
local v = redis.call('HMGET', x, 'e', 'u')
local e = tonumber(v[1])
if not e or e <= now then return {0} end
local cursor = op
if op == 'renew' then
  local u = tonumber(v[2])
  if redis.call('HLEN', x) - 2 + u < tonumber(ARGV[6]) or u < tonumber(ARGV[7]) then
    redis.call('DEL', x)
    return {0}
  end
  e, cursor = now + ttl, '0'
  redis.call('HSET', x, 'e', string.format('%.0f', e))
  redis.call('PEXPIRE', x, math.ceil(ttl / 1000) + 1)
end
-- The walk writes only what the hold's longer life changes: the entry's
-- expiry and, when the hold outlives it, the summary's M and the keys'
-- expiry (see put in prelude.lua); the bounds m and hm may stay lower.
local r = redis.call('HSCAN', x, cursor, 'MATCH', 'm:*', 'COUNT', 1000)
local fs = r[2]
local ex = struct.pack('>d', e)
for i = 1, #fs, 2 do
  local m = string.sub(fs[i], 3)
  local owner = string.sub(m, 33)
  local key = start .. string.sub(m, 1, 32) .. '}:r'
  local v = redis.call('HMGET', key, 'o:' .. owner, 'b:' .. owner, 'S')
  local raw = v[1]
  -- The entry: k (1 byte), mode (1), limit (4), then six doubles, the
  -- expiry last (from byte 47), then info.
  if not raw or v[2] ~= sid or string.byte(raw, 1) ~= 1 or struct.unpack('>d', raw, 47) <= now then
    redis.call('DEL', x)
    return {0}
  end
  if struct.unpack('>d', raw, 47) < e then
    local w = string.sub(raw, 1, 46) .. ex .. string.sub(raw, 55)
    local nh, nq, xq, xh, t, mn, hm, mx = struct.unpack('>IIIIdddd', v[3])
    if e > mx then
      mx = 2 * e - now
      redis.call('HSET', key, 'o:' .. owner, w, 'S', struct.pack('>IIIIdddd', nh, nq, xq, xh, t, mn, hm, mx))
      local px = math.max(math.ceil((mx - now) / 1000) + linger, 1)
      redis.call('PEXPIRE', key, px)
      if nq > 0 then redis.call('PEXPIRE', string.sub(key, 1, -2) .. 'q', px) end
    else
      redis.call('HSET', key, 'o:' .. owner, w)
    end
  end
end
return {1, r[1], redis.call('HLEN', x)}
