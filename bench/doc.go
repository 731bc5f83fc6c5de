// Package bench compares redlock with github.com/go-redsync/redsync/v4 and
// with the floor (the raw Redis commands, no library logic) on the same local
// redis-server nodes in the same run. It holds only benchmarks; it is a
// separate module so that the root go.mod never requires redsync or
// toxiproxy. See docs/benchmarks.md for the method and the results.
package bench
