-- Election: publish the leader's term and value in the leader record next to
-- the election's lock key, while that key still holds the leader's token, so
-- that only the leader writes it. The record has no ttl: a reader counts it
-- only while the lock key holds the token it names (elect_read.lua). The
-- leader sends it again on every keep tick, so that a node whose key was
-- re-seeded after an empty restart gets the record back; a record that is
-- already the same is left alone, so that a repeat writes nothing.
-- KEYS[1] lock key, KEYS[2] leader record; ARGV[1] token, ARGV[2] term,
-- ARGV[3] value.
-- Returns 1 if the record holds the leader's term and value now, 0 if the key
-- does not hold the token.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
local rec = redis.call("HMGET", KEYS[2], "token", "term", "value")
if rec[1] == ARGV[1] and rec[2] == ARGV[2] and rec[3] == ARGV[3] then
	return 1
end
redis.call("HSET", KEYS[2], "token", ARGV[1], "term", ARGV[2], "value", ARGV[3])
return 1
