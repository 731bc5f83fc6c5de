// Package bench compares redlock with github.com/go-redsync/redsync/v4, with
// github.com/bsm/redislock and with the floor (the raw Redis commands, no
// library logic) on the same local redis-server nodes in the same run:
// through redigo, and through each driver adapter (goredis, rueidis,
// valkeygo) against redsync's adapter for the same driver, on the same
// client objects. It holds only benchmarks; it is a separate module so that
// the root go.mod never requires redsync, redislock, the drivers or
// toxiproxy. See docs/benchmarks.md for the method and the results.
package bench
