package goredis

import "time"

// SetPubsubPing sets Subscribe's ping interval until restore is called.
func SetPubsubPing(d time.Duration) (restore func()) {
	old := pubsubPing
	pubsubPing = d
	return func() { pubsubPing = old }
}
