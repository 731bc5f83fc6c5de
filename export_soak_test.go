package redlock

// PooledCalls returns how many answered calls c's pipes keep for reuse
// (pipe.go's free lists, at most maxFreeCalls a node). They fill up as
// faults queue calls, and stay: the soak test counts them so that it can
// tell their bounded growth from a leak.
func PooledCalls(c *Client) int {
	n := 0
	for _, nd := range c.nodes {
		p := &nd.pipe
		p.freeMu.Lock()
		n += len(p.free)
		p.freeMu.Unlock()
	}
	return n
}
