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
