-- renew: KEYS hashes; ARGV linger, then owner and TTL per key. It returns
-- one string of 33 bytes per key: 1, then the token, created, renewed and
-- expires times as big-endian doubles if the owner held the key's name;
-- else 0 and zeros. (One string costs the client a fraction of what an
-- array of arrays of integers costs it to read.)

-- #include head
-- #include prelude

local linger = tonumber(ARGV[1])
local now = now_us()
local none = struct.pack('>Bdddd', 0, 0, 0, 0, 0)
local out = {}
for i, key in ipairs(KEYS) do
  local owner, ttl = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  local k, mode, limit, tok, _, _, cr, _, _, raw, pos = open(key, now, nil, owner)
  local r = none
  if k == 1 then
    put(owner, 1, mode, limit, tok, ttl, 0, cr, now, now + ttl, string.sub(raw, pos))
    r = struct.pack('>Bdddd', 1, tok, cr, now, now + ttl)
  end
  finish(linger)
  out[i] = r
end
return table.concat(out)
