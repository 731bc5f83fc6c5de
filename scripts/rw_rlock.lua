-- Read-write lock, reader acquisition: add the caller's token to the readers
-- set, scored by its expiry in milliseconds of this node's TIME, if no writer
-- holds the writer key and no waiting writer has left its intent mark.
-- Expired readers are pruned after the add, and the set's own ttl is raised
-- to cover the new reader, so that an abandoned set disappears.
--
-- The first write is the ZADD, which Redis refuses on a node past
-- maxmemory, so a full node fails the whole script with OOM
-- (semaphore_acquire.lua has the rule).
--
-- KEYS[1] writer key, KEYS[2] readers set, KEYS[3] intent mark;
-- ARGV[1] token, ARGV[2] ttl ms.
-- Returns 1 if the reader was added, 0 otherwise.
if redis.call("EXISTS", KEYS[1]) == 1 or redis.call("EXISTS", KEYS[3]) == 1 then
	return 0
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. now)
if redis.call("PTTL", KEYS[2]) < ttl + 1 then
	redis.call("PEXPIRE", KEYS[2], ttl + 1)
end
return 1
