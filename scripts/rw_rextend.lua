-- Read-write lock, reader extension: while the caller's token is a live
-- member of the readers set, make it live at least ttl from now. ZADD GT
-- never shortens it, as PEXPIRE GT does for the mutex. An expired member is
-- not revived: a writer may have been granted since it expired.
--
-- The first write is a PEXPIRE, which Redis lets through on a node past
-- maxmemory, and with it the ZADD that follows (semaphore_acquire.lua has
-- the rule): a held reader is extended on a full node, as the mutex's key
-- is by extend.lua. It adds no member, so it cannot grow the set.
--
-- KEYS[1] readers set; ARGV[1] token, ARGV[2] ttl ms.
-- Returns 1 if the token is live (its expiry is now at least ttl away),
-- 0 otherwise.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score or tonumber(score) < now then
	return 0
end
redis.call("PEXPIRE", KEYS[1], ttl + 1, "GT")
redis.call("ZADD", KEYS[1], "GT", now + ttl, ARGV[1])
return 1
