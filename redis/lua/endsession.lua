-- endsession: a Store's Close releases every hold of one of its sessions
-- (driver.SessionReleaser). KEYS the session's hash; ARGV the start of the
-- names' keys ("<prefix>:{"), linger, the session's id, then '0' for the
-- first call or the cursor the last call returned. The first call ends
-- the session (its expiry goes to 0: no renewal or binding takes it
-- again); each call releases up to a thousand of its holds, as
-- release.lua would, and the last deletes the session. It returns the
-- cursor of the holds left ('0' when none is).

-- #include head
-- #include prelude

local x, start, linger, sid, cursor = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
if cursor == '0' and redis.call('EXISTS', x) == 1 then redis.call('HSET', x, 'e', 0) end
local r = redis.call('HSCAN', x, cursor, 'MATCH', 'm:*', 'COUNT', 1000)
local fs = r[2]
local now
for i = 1, #fs, 2 do
  local m = string.sub(fs[i], 3)
  local owner = string.sub(m, 33)
  local key = start .. string.sub(m, 1, 32) .. '}:r'
  -- Owners are unique to a lease: the owner's entry is the session's
  -- hold, or a hold its lease took again, which Close releases too.
  local v = redis.call('HMGET', key, 'S', 'o:' .. owner)
  if v[1] and v[2] then
    local nh, nq = struct.unpack('>II', v[1])
    if nh + nq == 1 then
      -- The owner's entry is the name's only one, and no queue (release.lua's fast path).
      redis.call('DEL', key)
    else
      now = now or now_us()
      local k, mode = open(key, now, nil, owner)
      if k == 1 then
        drop(owner, k, mode)
        X.D[#X.D + 1] = 'b:' .. owner
      end
      finish(linger)
    end
  end
end
if r[1] == '0' then redis.call('DEL', x) end
return r[1]
