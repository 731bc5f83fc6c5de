// Package goredis adapts go-redis v9 (github.com/redis/go-redis/v9) to
// redlock.Pool, the port through which the redlock core speaks to one
// quorum member. A program that already has go-redis clients hands them to
// redlock.New, one Pool per independent member, and keeps its own TLS, ACL,
// pool and Sentinel settings:
//
//	pools := make([]redlock.Pool, len(clients))
//	for i, c := range clients {
//		pools[i] = goredis.NewPool(c)
//	}
//	locker, err := redlock.New(pools)
//
// The module is separate from redlock's, so that only programs that import
// it depend on go-redis.
//
// # Batches
//
// The core groups the commands that concurrent callers send to one member
// and hands each group to Exec at once. Exec sends a single command by the
// client's Process, and a group as one go-redis pipeline: the group then
// costs one write and one read on one connection, instead of a round trip,
// and a connection, per command. A pipeline keeps the order of the commands,
// which the core relies on for the commands of one lock. It is not a
// transaction, and the core never needs one.
//
// go-redis's own retries are turned off for these commands, whatever the
// client's MaxRetries (MOVED and ASK redirections are still followed).
// The core retries whole operations with fresh deadlines, and must see every
// failure: a SET NX that the driver sent again after losing its reply would
// come back null, as if another client held the key.
//
// Replies pass through as go-redis reads them: strings, int64s and
// []interface{}. A null reply, which go-redis reports as redis.Nil, becomes
// a nil value; an error reply (a redis.Error) becomes a driver.ReplyError
// with the server's text, such as "NOSCRIPT ..." or "READONLY ..."; any
// other error (a dial, a broken connection, a timeout, an exhausted pool)
// fails the whole batch.
//
// # Deadlines
//
// The core gives each batch a context whose deadline is the node timeout,
// and stops waiting for the member at that deadline whatever the client
// does, so no caller ever waits longer. What the client's options decide is
// how long a batch sent to a silent member keeps its connection and its
// place in the core's queue for that member:
//
//   - ContextTimeoutEnabled: true (recommended) makes go-redis set each
//     socket deadline from the context, so a batch gives up, and frees its
//     connection, at the node timeout.
//   - Without it, go-redis ignores context deadlines on the socket, in the
//     connection handshake too, and waits ReadTimeout and WriteTimeout
//     instead (5 seconds each by default in v9.22). The next batch to the
//     same member on the same wire (pipe.go) waits behind it and fails at its own
//     deadline. Set those timeouts to a small multiple of the node timeout
//     if the client must keep ContextTimeoutEnabled off for other code.
//
// Dials follow the context either way, except a TLS dial, which go-redis
// makes without it and DialTimeout bounds. The Pool never changes the
// client's options.
//
// A *redis.Client of one standalone master, without TLS and with
// ContextTimeoutEnabled (and neither ReadTimeout nor WriteTimeout set to
// -2, which turns the socket's deadlines off), therefore returns by the
// context's deadline, and
// its Pool says so (Pool.HonorsDeadline, driver.DeadlineHonorer). A
// redlock.Client of one such node runs each operation on the caller's
// goroutine rather than on one of its own, which halved the time of an
// uncontended Lock+Unlock at N=1 in docs/benchmarks.md. Every other client
// keeps the core's own bound.
//
// # A node that is down
//
// A member that refuses connections costs a Lock nothing while a majority
// answers: its dial fails at once, and the core counts the others. Two
// things still need settings, both shown in the package Example:
//
//   - The log. go-redis reports every failed dial through its package-wide
//     logger ("redis: connection pool: failed to dial after 5 attempts"),
//     one line per attempt of every operation on the member, dozens per
//     second under load. redlock already reports each node's failure to its
//     Observer (observe.Slog, the otel module), once per answer and with the
//     node's name. redis.SetLogger(goredis.QuietLogger(log.Printf)) drops
//     those dial lines and keeps the rest. The logger is process-wide and
//     read without a lock: set it at the start of main, before any client.
//   - The time to give up. With a majority down, Lock retries: WithTries
//     (32) attempts, each at most the node timeout (50 ms), with
//     WithRetryDelay (50 to 250 ms) between them: about 5 s measured, 9.6 s
//     at most, before ErrNotObtained. Bound it with a ctx deadline or a
//     smaller WithTries: tries × (node timeout + 250 ms) at most.
//
// Client options that keep a dead member cheap: DialerRetries: 1 (go-redis
// otherwise dials 5 times, 100 ms apart, longer than the node timeout
// anyway), DialTimeout and PoolTimeout near the node timeout (a TLS dial
// and a wait for a pooled connection are not bounded by ctx otherwise), and
// MaxRetries: -1 for the client's other users (the Pool already sends
// redlock's commands without go-redis's retries).
//
// # Clients
//
// NewPool takes a redis.UniversalClient:
//
//   - *redis.Client, from redis.NewClient: one standalone master. Its name
//     is its Addr.
//   - *redis.Client, from redis.NewFailoverClient (or redis.NewUniversalClient
//     with MasterName): a Sentinel-managed master with its replicas, which is
//     one member of the quorum, not several. Its options name no server, so
//     give it a name with NewNamedPool. A failover to a replica that missed
//     the last writes can lose a lock on that member, as a master that
//     restarts without persistence does; the other members cover it.
//   - *redis.ClusterClient, from redis.NewClusterClient: a whole Redis
//     Cluster as one member. Every command names its first key to go-redis,
//     which routes it to the key's slot and follows MOVED and ASK; the core
//     keeps the lock key and its fencing counter in one slot. A batch touches
//     one connection per cluster node. Its name is its seed addresses,
//     joined by commas. With ACLs, allow the commands go-redis sends to learn
//     the cluster, CLUSTER SLOTS and COMMAND, besides the library's own.
//
// A *redis.Ring is refused: redlock.New rejects its Pool with an error
// wrapping redlock.ErrInvalid. A Ring spreads keys over
// independent shards by consistent hashing, and moves a key to another shard
// when a shard fails its health check: a held lock would then read as free.
// Make one Pool of each shard's *redis.Client instead, if the shards are
// independent masters.
//
// # Subscriptions
//
// Pool implements driver.Subscriber with a go-redis PubSub, on a
// connection of its own. go-redis reconnects a broken PubSub silently;
// Subscribe instead ends with the error, so that the caller knows it may
// have missed a message, and it pings an idle connection so that a silent
// server ends the subscription within ten seconds.
package goredis
