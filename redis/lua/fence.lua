-- fence: the fence kit's write (package fence). KEYS[1] is the fence key
-- (the largest token admitted, in decimal), KEYS[2] the key to set; ARGV[1]
-- is the token (decimal), ARGV[2] the value, ARGV[3] the TTL in
-- milliseconds (0: none). Unless a larger token was admitted, it admits the
-- token and sets the key, and returns {1, token}; otherwise it changes
-- nothing and returns {0, the largest token}.

-- Tokens are compared as decimal strings: Lua's numbers are doubles, which
-- do not hold every 64-bit token.
local function less(a, b)
	if #a ~= #b then
		return #a < #b
	end
	return a < b
end

local highest = redis.call('GET', KEYS[1])
if highest then
	if not string.match(highest, '^[1-9]%d*$') and highest ~= '0' then
		return redis.error_reply('fence key ' .. KEYS[1] .. ' does not hold a token')
	end
	if less(ARGV[1], highest) then
		return {0, highest}
	end
end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[3] ~= '0' then
	redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
	redis.call('SET', KEYS[2], ARGV[2])
end
return {1, ARGV[1]}
