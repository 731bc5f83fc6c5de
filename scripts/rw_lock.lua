-- Read-write lock, writer acquisition: set the writer key to the caller's
-- token if no writer holds it, no reader is live, and no reader is entitled
-- to go first; otherwise leave (or renew) a writer-intent mark that new
-- readers respect, so that a waiting writer is not starved by a stream of
-- readers. Readers are tokens in a sorted set scored by their expiry in
-- milliseconds of this node's TIME; a reader is live while its score is not
-- below the time, as a key with PX is. The entitled set holds the waiting
-- readers that a writer's release let in before the next writer
-- (rw_unlock.lua): phase fairness.
--
-- The script reads before it writes, and its first write is a SET, which
-- Redis refuses on a node past maxmemory: a script without a shebang is
-- checked for OOM only at its first write, and only if that write may grow
-- memory (semaphore_acquire.lua has the rule). So a full node fails the
-- whole script with OOM, as it fails the mutex's SET.
--
-- With fencing, the grant also reads the node's fencing counter, in the same
-- atomic step, as acquire_fenced.lua does for the mutex (fencing, round 1;
-- raise_fence.lua on the writer key is round 2).
--
-- KEYS[1] writer key, KEYS[2] readers set, KEYS[3] intent mark, KEYS[4]
-- fencing counter, KEYS[5] entitled readers; ARGV[1] token, ARGV[2] ttl ms,
-- ARGV[3] intent id, ARGV[4] intent ttl ms (0: leave no mark), ARGV[5] "1"
-- with fencing.
-- Returns 0 if the writer key was not set; if it was, 1, or with fencing
-- the counter plus 1.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call("EXISTS", KEYS[1]) == 0 and redis.call("ZCOUNT", KEYS[2], now, "+inf") == 0
	and redis.call("ZCOUNT", KEYS[5], "(" .. now, "+inf") == 0 then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	redis.call("DEL", KEYS[2]) -- only expired readers are left in it
	redis.call("DEL", KEYS[5]) -- and only expired entitlements
	if redis.call("GET", KEYS[3]) == ARGV[3] then
		redis.call("DEL", KEYS[3])
	end
	if ARGV[5] == "1" then
		return tonumber(redis.call("GET", KEYS[4]) or "0") + 1
	end
	return 1
end
if tonumber(ARGV[4]) > 0 then
	local mark = redis.call("GET", KEYS[3])
	if not mark or mark == ARGV[3] then
		redis.call("SET", KEYS[3], ARGV[3], "PX", ARGV[4])
	end
end
return 0
