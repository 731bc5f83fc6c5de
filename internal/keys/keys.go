// Package keys names the keys that redlock keeps beside a lock's own, so
// that the library and its command (redlock status, the demo) agree on them.
package keys

import "strings"

// DefaultFencePrefix is the default of WithFencePrefix.
const DefaultFencePrefix = "redlock:fence:"

// Fence names the fencing counter of a lock key, under prefix. It has no
// ttl: the counter must outlive every lock on the key (docs/fencing.md).
//
// The counter must hash to the lock key's slot, or a Redis Cluster member
// refuses the fenced scripts (CROSSSLOT). The slot of a key with a hash tag
// (a non-empty "{...}") is that of its tag, and a prefix without braces keeps
// the tag: prefix + key. The slot of a key without one is that of the whole
// key, which the counter takes as its tag: prefix + "{key}". A key without a
// tag that contains '}' cannot be a tag; it keeps the plain prefix, which
// works on standalone masters only (docs/drivers.md).
func Fence(prefix, key string) string {
	if HasTag(key) || strings.IndexByte(key, '}') >= 0 {
		return prefix + key
	}
	return prefix + "{" + key + "}"
}

// HasTag reports whether Redis Cluster would hash key by a tag: a '{'
// followed, later, by a '}' with at least one byte between them.
func HasTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	closing := strings.IndexByte(key[open+1:], '}')
	return closing > 0
}

// Slot is prefix + key in key's Redis Cluster slot: key itself when it has
// a tag, prefix + "{key}" when it can be one, and prefix + "{~key}" for a
// key with a stray '}'. The semaphore's and the read-write lock's keys are
// named this way.
func Slot(prefix, key string) string {
	switch {
	case HasTag(key):
		return prefix + key
	case strings.IndexByte(key, '}') < 0:
		return prefix + "{" + key + "}"
	default:
		return prefix + "{~" + key + "}"
	}
}

// Semaphore names the sorted set of the semaphore on key.
func Semaphore(key string) string { return Slot("redlock:sem:", key) }

// RW names the keys of the read-write lock on key: the writer's lock, the
// readers' sorted set and the waiting writer's intent.
func RW(key string) (writer, readers, intent string) {
	base := Slot("redlock:rw:", key)
	return base + ":w", base + ":r", base + ":i"
}

// Leader names the leader record of the election on key, by Fence's rule.
func Leader(key string) string { return Fence("redlock:leader:", key) }
