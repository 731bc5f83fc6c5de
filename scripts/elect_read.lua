-- Election: the leader this node sees. That is the leader record's term and
-- value, if the lock key holds the token the record names.
-- KEYS[1] lock key, KEYS[2] leader record.
-- Returns {term, value}; nil when the node has no lock key, so that it sees
-- no leader; or 0 when it has the key but no record naming its token (a
-- holder that has not published here yet, a key re-seeded after an empty
-- restart, a record left by an earlier leader, a plain Lock on the name):
-- someone holds the key here, and the node cannot say who, so it must not
-- count as seeing no leader.
local token = redis.call("GET", KEYS[1])
if not token then
	return false
end
local rec = redis.call("HMGET", KEYS[2], "token", "term", "value")
if rec[1] ~= token then
	return 0
end
return {rec[2], rec[3]}
