-- renew: KEYS hashes; ARGV linger, then owner and TTL per key. It returns,
-- per key, {token, created, renewed, expires} or 0.

-- #include head
-- #include prelude

local linger = tonumber(ARGV[1])
local now = now_us()
local out = {}
for i, key in ipairs(KEYS) do
  local owner, ttl = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  local k, mode, limit, tok, _, _, cr, _, _, raw, pos = open(key, now, nil, owner)
  local r = 0
  if k == 1 then
    put(owner, 1, mode, limit, tok, ttl, 0, cr, now, now + ttl, string.sub(raw, pos))
    r = {tok, cr, now, now + ttl}
  end
  finish(linger)
  out[i] = r
end
return out
