-- Election: the leader this node sees. That is the leader record's term and
-- value, if the lock key holds the token the record names; a record left by
-- an earlier leader, or a key whose holder has not published yet, shows no
-- leader.
-- KEYS[1] lock key, KEYS[2] leader record.
-- Returns {term, value}, or nil when the node sees no leader.
local token = redis.call("GET", KEYS[1])
if not token then
	return false
end
local rec = redis.call("HMGET", KEYS[2], "token", "term", "value")
if rec[1] ~= token then
	return false
end
return {rec[2], rec[3]}
