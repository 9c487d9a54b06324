-- release: KEYS hashes; ARGV linger, then the owner per key. It returns,
-- per key, 1 if a hold was released, else 0 (a queue entry may have been
-- removed), then the session of each released hold that was bound to one
-- (see unbind).

-- #include head
local out, i, now = {}, 1, nil

-- handoff releases owner's exclusive hold (entry e, session sid or nil) of
-- the name whose hash is key and summary s, and hands the name to the head
-- of the queue, when only exclusive requests wait and no entry can have
-- expired: what the general path does then (drop, promote, hand, finish),
-- field for field, without the cost of defining it. It returns false,
-- having changed nothing, in any other case.
local function handoff(key, owner, s, e, sid)
  local nh, nq, xq, xh, t, m, hm, mx = struct.unpack('>IIIIdddd', s)
  if nh ~= 1 or xh ~= 1 or nq == 0 or xq ~= nq then return false end
  local k, mode = struct.unpack('>BB', e)
  now = now or now_us()
  if k ~= 1 or mode ~= 1 or now >= m then return false end -- m <= its expiry
  local b, mx0 = string.sub(key, 1, -2), mx
  local d, w = {'o:' .. owner}, {}
  if sid then
    d[2] = 'b:' .. owner
    unbind(b, owner, sid)
  end
  nh, xh, hm = 0, 0, 0
  local o = redis.call('ZPOPMIN', b .. 'q')[1]
  local raw = o and redis.call('HGET', key, 'o:' .. o)
  if o then nq, xq = nq - 1, xq - 1 end
  if raw then
    local _, hmode, limit, _, qttl, httl, _, _, _, pos = struct.unpack('>BBIdddddd', raw)
    local tok = next_token(b .. 'c', now)
    local ex = now + httl + math.min(math.max(math.floor(httl / 20), 1000), 50000)
    nh, xh, hm = 1, 1, ex
    if nq == 0 or ex < m then m = ex end
    if ex > mx then mx = ex + (ex - now) end
    w[1], w[2] = 'o:' .. o, struct.pack('>BBIdddddd', 1, hmode, limit, tok, httl, 0, now, now, ex) .. string.sub(raw, pos)
    local mb = b .. 'w:' .. o
    redis.call('LPUSH', mb, struct.pack('>ddd', tok, now, ex))
    redis.call('PEXPIRE', mb, math.ceil(qttl / 1000))
  end
  if nh + nq == 0 then
    redis.call('DEL', key, b .. 'q')
    return true
  end
  redis.call('HDEL', key, unpack(d))
  w[#w + 1], w[#w + 2] = 'S', struct.pack('>IIIIdddd', nh, nq, xq, xh, t, m, hm, mx)
  redis.call('HSET', key, unpack(w))
  if mx ~= mx0 then
    local px = math.max(math.ceil((mx - now) / 1000) + tonumber(ARGV[1]), 1)
    redis.call('PEXPIRE', key, px)
    if nq > 0 then redis.call('PEXPIRE', b .. 'q', px) end
  end
  return true
end

-- The fast paths, key after key while one applies: the name has no state,
-- or the owner's entry is its only entry (nobody else holds or waits), so
-- that the state goes, as the general path would delete it, promoting
-- nobody; or the owner holds it alone and exclusive requests wait
-- (handoff). The first key none applies to, and every key after it (a
-- batch may name a name twice), take the general path.
while i <= #KEYS do
  local key = KEYS[i]
  local v = redis.call('HMGET', key, 'S', 'o:' .. ARGV[i + 1], 'b:' .. ARGV[i + 1])
  if v[1] then
    local nh, nq = struct.unpack('>II', v[1])
    if not v[2] then break end
    if nh + nq ~= 1 then
      if not handoff(key, ARGV[i + 1], v[1], v[2], v[3]) then break end
      out[i] = 1
    else
      local k, _, _, _, _, _, _, _, ex = struct.unpack('>BBIdddddd', v[2])
      now = now or now_us()
      redis.call('DEL', key, string.sub(key, 1, -2) .. 'q')
      out[i] = 0
      if k == 1 and ex > now then
        out[i] = 1
        if v[3] then unbind(string.sub(key, 1, -2), ARGV[i + 1], v[3]) end
      end
    end
  else
    out[i] = 0
  end
  i = i + 1
end
if i > #KEYS then
  for _, x in ipairs(UNBOUND) do out[#out + 1] = x end
  return out
end

-- #include prelude

local linger = tonumber(ARGV[1])
now = now or now_us()
for j = i, #KEYS do
  local owner = ARGV[j + 1]
  local k, mode = open(KEYS[j], now, nil, owner)
  local r = 0
  if k then
    if k == 1 then r = 1 end
    drop(owner, k, mode, X.SID)
  end
  finish(linger)
  out[j] = r
end
for _, x in ipairs(UNBOUND) do out[#out + 1] = x end
return out
