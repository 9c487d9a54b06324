-- poke: KEYS hash, mailbox; ARGV owner, linger. It takes the owner out of
-- the queue (its Lock is over) and pushes "0" into its mailbox, to end the
-- BLPOP blocked there. A grant promote made before it stays: the Lock that
-- ended releases it, or holds it.

-- #include head
-- #include prelude

local owner, linger = ARGV[1], tonumber(ARGV[2])
local k, mode = open(KEYS[1], now_us(), nil, owner)
if k == 2 then drop(owner, k, mode) end
finish(linger)
redis.call('LPUSH', KEYS[2], '0')
redis.call('PEXPIRE', KEYS[2], 1000)
return 1
