-- mark: KEYS the waiter's mailbox (only to route the call). It returns the
-- server's time in µs, taken just before the waiter's BLPOP (on a cluster,
-- where a TIME command could go to another node).

local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
