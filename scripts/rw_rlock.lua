-- Read-write lock, reader acquisition: add the caller's token to the readers
-- set, scored by its expiry in milliseconds of this node's TIME, if no writer
-- holds the writer key and either no waiting writer has left its intent mark
-- or this reader is entitled to go before that writer. Expired readers are
-- pruned after the add, and the set's own ttl is raised to cover the new
-- reader, so that an abandoned set disappears.
--
-- Phase fairness: a refused reader that will try again registers its wait
-- id in the waiting set, scored by when its registration lapses (the mark
-- ttl, renewed by each attempt). A writer's release moves every live waiting
-- reader into the entitled set (rw_unlock.lua); an entitled reader passes
-- the intent mark, and no writer is granted while a live entitlement is left
-- (rw_lock.lua). A granted reader leaves both sets.
--
-- The first write is a ZADD, which Redis refuses on a node past maxmemory,
-- so a full node fails the whole script with OOM (semaphore_acquire.lua has
-- the rule).
--
-- KEYS[1] writer key, KEYS[2] readers set, KEYS[3] intent mark, KEYS[4]
-- waiting readers, KEYS[5] entitled readers; ARGV[1] token, ARGV[2] ttl ms,
-- ARGV[3] wait id ("" for none), ARGV[4] registration ttl ms (0: do not
-- register).
-- Returns 1 if the reader was added, 0 otherwise, and 2 if the token is
-- already a member of the readers set: a token function that repeats
-- itself. That member is another reader's, and re-adding it would let the
-- first of the two Unlocks end both holds (semaphore_acquire.lua has the
-- same check).
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entitled = false
if ARGV[3] ~= "" then
	local until_ = redis.call("ZSCORE", KEYS[5], ARGV[3])
	entitled = until_ and tonumber(until_) > now
end
if redis.call("EXISTS", KEYS[1]) == 1 or (not entitled and redis.call("EXISTS", KEYS[3]) == 1) then
	local reg = tonumber(ARGV[4])
	if ARGV[3] ~= "" and reg > 0 then
		local set = KEYS[4]
		if entitled then
			set = KEYS[5]
		end
		redis.call("ZADD", set, "GT", now + reg, ARGV[3]) -- adds it, or renews it
		if redis.call("PTTL", set) < reg + 1 then
			redis.call("PEXPIRE", set, reg + 1)
		end
	end
	return 0
end
if redis.call("ZSCORE", KEYS[2], ARGV[1]) then
	return 2
end
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. now)
if redis.call("PTTL", KEYS[2]) < ttl + 1 then
	redis.call("PEXPIRE", KEYS[2], ttl + 1)
end
if ARGV[3] ~= "" then
	redis.call("ZREM", KEYS[4], ARGV[3])
	redis.call("ZREM", KEYS[5], ARGV[3])
end
return 1
