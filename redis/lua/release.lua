-- release: KEYS hashes; ARGV linger, then the owner per key. It returns,
-- per key, 1 if a hold was released, else 0 (a queue entry may have been
-- removed), then the session of each released hold that was bound to one
-- (see unbind).

-- #include head
local out, i, now = {}, 1, nil

-- The fast path, key after key while it applies: the name has no state,
-- or the owner's entry is its only entry (nobody else holds or waits), so
-- that the state goes, as the general path would delete it, promoting
-- nobody. The first key it does not apply to, and every key after it (a
-- batch may name a name twice), take the general path.
while i <= #KEYS do
  local key = KEYS[i]
  local v = redis.call('HMGET', key, 'S', 'o:' .. ARGV[i + 1], 'b:' .. ARGV[i + 1])
  if v[1] then
    local nh, nq = struct.unpack('>II', v[1])
    if nh + nq ~= 1 or not v[2] then break end
    local k, _, _, _, _, _, _, _, ex = struct.unpack('>BBIdddddd', v[2])
    now = now or now_us()
    redis.call('DEL', key, string.sub(key, 1, -2) .. 'q')
    out[i] = 0
    if k == 1 and ex > now then
      out[i] = 1
      if v[3] then unbind(string.sub(key, 1, -2), ARGV[i + 1], v[3]) end
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
