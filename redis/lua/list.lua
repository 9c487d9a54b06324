-- list: KEYS hashes; ARGV name prefix, owner (empty for any), queued
-- (1/0). It returns {now, entries...}, flat (see emit), expired entries not
-- yet dropped included.

-- #include head
-- #include prelude

local prefix, owner, queued = ARGV[1], ARGV[2], ARGV[3] == '1'
local out = {now_us()}
for _, key in ipairs(KEYS) do
  local all
  if owner ~= '' then
    local v = redis.call('HMGET', key, 'n', 'o:' .. owner)
    all = {'n', v[1], 'o:' .. owner, v[2]}
  else
    all = redis.call('HGETALL', key)
  end
  local name
  for i = 1, #all, 2 do
    if all[i] == 'n' then name = all[i + 1] end
  end
  if name and string.sub(name, 1, #prefix) == prefix then
    for i = 1, #all, 2 do
      local f, raw = all[i], all[i + 1]
      if raw and string.sub(f, 1, 2) == 'o:' and (queued or string.byte(raw, 1) == 1) then
        emit(out, name, string.sub(f, 3), raw)
      end
    end
  end
end
return out
