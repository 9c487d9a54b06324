-- purge: KEYS hashes; ARGV linger. It drops expired entries and returns
-- {now, expired holders...}, flat (see emit).

-- #include head
-- #include prelude

local linger = tonumber(ARGV[1])
local now = now_us()
local out = {now}
for _, key in ipairs(KEYS) do
  local gone = {}
  open(key, now, nil, nil, gone)
  finish(linger)
  for j = 1, #gone, 2 do emit(out, X.NAME, gone[j], gone[j + 1]) end
end
return out
