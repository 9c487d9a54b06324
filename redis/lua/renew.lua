-- renew: KEYS one hash of the batch (it routes the call to the slot the
-- batch's names share); ARGV linger, the TTL of every hold (0: each hold
-- gives its own), the start of a hash's key ("<prefix>:{"), then the holds
-- packed in one string: per hold its tag (32 bytes), the length of its
-- owner ('>I4') and the owner, and its TTL ('>d') when ARGV[2] is 0. One
-- string costs the client a fraction of what an argument per hold costs
-- it to build and send. It returns one string of 33 bytes per hold: 1,
-- then the token, created, renewed and expires times as big-endian
-- doubles if the owner held the name; else 0 and zeros. A hold bound to
-- a session lasts until the later of its TTL and the session's expiry.

-- #include head
-- #include prelude

local linger, all, start, holds = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = now_us()
local none = struct.pack('>Bdddd', 0, 0, 0, 0, 0)
local out = {}
local pos, n, ttl = 1, 0, all
while pos <= #holds do
  local key = start .. string.sub(holds, pos, pos + 31) .. '}:r'
  local len
  len, pos = struct.unpack('>I4', holds, pos + 32)
  local owner = string.sub(holds, pos, pos + len - 1)
  pos = pos + len
  if all == 0 then ttl, pos = struct.unpack('>d', holds, pos) end
  local k, mode, limit, tok, _, _, cr, _, _, raw, p = open(key, now, nil, owner)
  local r = none
  if k == 1 then
    local ex = now + ttl
    local se = X.SID and session_live(session_key(X.B, X.SID), now)
    if se and se > ex then ex = se end
    put(owner, 1, mode, limit, tok, ttl, 0, cr, now, ex, string.sub(raw, p))
    r = struct.pack('>Bdddd', 1, tok, cr, now, ex)
  end
  finish(linger)
  n = n + 1
  out[n] = r
end
return table.concat(out)
