-- Read-write lock: a reader that gives up removes its wait id from the
-- waiting and entitled sets, so that writers need not wait for it to lapse.
-- KEYS[1] waiting readers, KEYS[2] entitled readers; ARGV[1] wait id.
-- Returns how many of the two held it.
return redis.call("ZREM", KEYS[1], ARGV[1]) + redis.call("ZREM", KEYS[2], ARGV[1])
