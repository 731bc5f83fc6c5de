package redlock

// Settle waits until no node call of c is running, including those that
// returned calls left in the background. Tests use it before they inspect
// every node.
func Settle(c *Client) { c.calls.Wait() }
