-- Semaphore acquire: admit the caller's member to the key's sorted set of
-- holders if the weights of the live members, with the caller's, come to at
-- most K. Each member's score is its expiry in milliseconds on this node's
-- clock (TIME), so that, as with PX for the mutex, the node alone judges
-- expiry; a member is live while its score is above the time. The set's own
-- ttl is kept at its latest score, so that it cleans itself up.
--
-- A member is "<weight>:<token>" (the client builds it), the weight in
-- decimal from 1 up. A member without that form counts as weight 1: one
-- with no weight, or with "0:", "-1:", "0x2:" or " 2:" before its first
-- colon (an older client's own token), which Lua's tonumber would read as
-- a weight below 1 or in another base. The loop below reads every member: the live
-- ones weigh at most K in all, and the expired ones are removed by every
-- write, so the set stays small.
--
-- A token that is already in a member, live or not, whatever its weight, is
-- refused: ZADD would re-score a member with the same weight, and one slot
-- would count for two holders.
--
-- The script reads before it writes, and its first write is ZADD, which
-- Redis refuses on a node past maxmemory. A script without a shebang is
-- checked for OOM only at its first write, and only if that write is one
-- that may grow memory (SET, ZADD, HSET, ...); a first write that frees
-- memory (ZREMRANGEBYSCORE, DEL, PEXPIRE) lets the rest of the script
-- through. So on a full node this script fails whole with OOM, as the
-- mutex's SET does, and writes nothing.
--
-- KEYS[1] holders set; ARGV[1] member, ARGV[2] ttl in milliseconds, ARGV[3]
-- K, ARGV[4] the member's weight.
-- Returns 1 if admitted, 0 if the live weights leave less than the caller's
-- weight free, 2 if the token is already in a member.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function split(m)
	local w = string.match(m, "^[1-9]%d*:")
	if w then
		return tonumber(string.sub(w, 1, -2)), string.sub(m, #w + 1)
	end
	return 1, m
end
local weight = tonumber(ARGV[4])
local _, token = split(ARGV[1])
local members = redis.call("ZRANGE", KEYS[1], 0, -1, "WITHSCORES")
local used = 0
for i = 1, #members, 2 do
	local w, tok = split(members[i])
	if tok == token then
		return 2
	end
	if tonumber(members[i + 1]) > now then
		used = used + w
	end
end
if used + weight > tonumber(ARGV[3]) then
	return 0
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
redis.call("PEXPIREAT", KEYS[1], last[2])
return 1
