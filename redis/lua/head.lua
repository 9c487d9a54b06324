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
