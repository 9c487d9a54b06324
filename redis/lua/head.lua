-- The head of every script that reads the clock or grants: the server's
-- time and the fencing tokens. Kept short: the fast paths run only this
-- and their own lines.

-- now_us is the server's time (TIME) in µs.
local function now_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- next_token returns the next fencing token of the name whose counter is
-- ckey, at time now: one more than the counter, or now if that is larger
-- (a hybrid logical clock). Tokens therefore exceed every token handed
-- out before even when the counter was lost (a restart without
-- persistence, the last second of an everysec append-only file, a replica
-- promoted while behind): the server's clock has moved past them since,
-- unless it stepped back. The counter expires a week after the clock
-- catches up with it, when the clock alone keeps tokens growing: an idle
-- name costs nothing after that. Numbers are doubles, exact to 2^53 (the
-- clock in µs is about 2^51); they are written with %.0f, never in
-- exponent form, so that the counter stays an integer string.
local function next_token(ckey, now)
  local tok = math.max((tonumber(redis.call('GET', ckey)) or 0) + 1, now)
  redis.call('SET', ckey, string.format('%.0f', tok), 'PX', string.format('%.0f', math.ceil((tok - now) / 1000) + 604800000))
  return tok
end

-- The sessions of one server's Stores (see session.lua): session sid of
-- the store whose names' keys start with "<prefix>:{" is the hash
-- "<prefix>:x:<sid>", and a hold of owner on the name with hash tag
-- <tag> is its member field "m:<tag><owner>".

-- session_key is the key of session sid of the store whose name keys
-- include base ("<prefix>:{<tag>}:").
local function session_key(base, sid)
  return string.sub(base, 1, -37) .. ':x:' .. sid
end

-- session_live returns the expiry of session x if it is live at now, else
-- false.
local function session_live(x, now)
  local e = tonumber(redis.call('HGET', x, 'e'))
  return e and e > now and e
end

-- bind makes owner's hold of the name whose keys start with base a member
-- of session x.
local function bind(x, base, owner)
  redis.call('HSET', x, 'm:' .. string.sub(base, -34, -3) .. owner, '')
end

-- UNBOUND lists the session of each hold that unbind took out of one.
local UNBOUND = {}

-- unbind takes owner's hold of the name whose keys start with base out of
-- session sid, counting one more unbinding, if the session still has it;
-- it reports whether it had. The unbindings reported are the client's to
-- count (see session.lua).
local function unbind(base, owner, sid)
  local x = session_key(base, sid)
  if redis.call('HDEL', x, 'm:' .. string.sub(base, -34, -3) .. owner) == 1 then
    redis.call('HINCRBY', x, 'u', 1)
    UNBOUND[#UNBOUND + 1] = sid
    return true
  end
  return false
end
