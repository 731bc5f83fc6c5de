// Package rueidis adapts a rueidis client (github.com/redis/rueidis) to
// redlock: NewPool turns a rueidis.Client the program already has into a
// redlock.Pool, which is also a driver.Namer and a driver.Subscriber. It
// is a module of its own, so that importing redlock brings in no rueidis,
// and importing this brings in rueidis and nothing more. A program that
// imports both packages names one of them, as in
//
//	import redlockrueidis "github.com/quorumlock/redlock/rueidis"
//
// # Making the client
//
// Each Pool is one Redlock node: one standalone master, one Sentinel-managed
// master with its replicas, or one whole Redis Cluster (docs/drivers.md).
// For a standalone master, make the client with
//
//	rueidis.ClientOption{
//		InitAddress:       []string{"redis-a:6379"},
//		ForceSingleClient: true,
//		DisableCache:      true,
//	}
//
// for these reasons:
//
//   - ForceSingleClient: rueidis.NewClient connects at once, and without it
//     fails when the master is down or refuses the handshake (NOAUTH, a
//     wrong password); a lock service should start with a master down, as
//     redlock tolerates a minority of them. With it, NewClient returns a
//     working client together with the error, and the client connects again
//     on use, so that the node fails each call with the cause until the
//     master is back. It also skips cluster discovery (CLUSTER SLOTS) on a
//     master that is not a cluster.
//   - DisableCache: client-side caching needs RESP3 and CLIENT TRACKING,
//     and without it NewClient fails against a server that speaks RESP2
//     only. redlock reads no cached value.
//   - ClientOption.Dialer.Timeout (5 s by default) bounds each attempt to
//     connect, including the handshake with a server that accepts the TCP
//     connection and never answers. Calls do not wait for it: see
//     Deadlines.
//
// # Batching
//
// Exec sends one command by Client.Do and a batch by Client.DoMulti, which
// writes the batch at once on one connection and returns the replies in
// order. The core already groups the commands that concurrent callers send
// to a node into batches, at most two in flight per node (pipe.go in
// redlock), and under load one (pipe.go, "One wire under load");
// rueidis's auto-pipelining merges the writes of batches in flight at once.
//
// Sending a batch command by command instead, and leaving all the merging
// to auto-pipelining, would need a round trip per command, or, from a
// goroutine per command, would lose the order of the commands on one key,
// which the port requires (an Unlock's release must not overtake its own
// SET). BenchmarkBatching measures them: Lock+Unlock over three local
// masters on two vCPUs, medians of six runs, when the core still had 16
// fixed lanes per node. With 128 goroutines (3.9 commands per batch) an operation took 121 µs with
// DoMulti, 266 µs with one Do per command and 166 µs with a goroutine per
// command; with 2 and 16 goroutines (one or two commands per batch) DoMulti
// and one Do per command were within noise of each other, and a goroutine
// per command was 52% slower with 2.
//
// ClientOption.DisableAutoPipelining, which gives each call a pooled
// connection of its own, is the client's choice and works with this
// adapter too; on the same benchmark it was 54% and 76% slower with 2 and
// 16 goroutines, and no faster with 128.
//
// # Replies
//
// Status and bulk strings come back as strings, integers as int64, arrays
// as []any, null replies as nil. An error reply becomes Reply.Err, a
// driver.ReplyError with the text the server sent, "ERR" included (rueidis
// strips it from its own RedisError). Any other error fails the whole
// batch, as the port says, even if it struck only some of the commands (a
// connection that broke mid-batch, one node of a cluster): the core counts
// every command of the batch as failed and undoes them as it undoes agreeing
// nodes. An error reply that rueidis reports as the connection's, to the
// handshake of a new connection (NOAUTH, WRONGPASS), fails the batch too,
// as a driver.ReplyError: the node's error then names the server's code,
// as it does with redigo, which gets the same error in reply to the SET.
//
// rueidis resends only commands marked read-only, and the commands Exec
// builds are not, so a SET or a script never runs twice; a cluster client
// does follow MOVED and ASK redirections, which run it once, on the right
// node, except for a write sent with its WAIT (redlock.WithReplicaAcks),
// which goes on a dedicated connection to its slot's primary and takes a
// redirection as its error reply (see Pool.Exec).
//
// # Redis Cluster and Sentinel
//
// A client made with a Redis Cluster's seeds in InitAddress (without
// ForceSingleClient) is a cluster client; Exec passes each command's first
// key to the command builder's Keys, so that the client routes it by slot,
// and DoMulti splits a batch by slot. Further keys, such as a fencing
// counter, go out as plain arguments: rueidis's builder panics on keys of
// different slots, and the server answers CROSSSLOT instead, which fails
// the node (docs/drivers.md explains which keys share a slot).
//
// A client with ClientOption.Sentinel.MasterSet set follows its Sentinels to
// the current primary; it is one node, whatever the number of replicas.
//
// NewPool names the node by the addresses the client knows when it is
// called (Client.Nodes): the master's, every cluster node's, or the primary
// that the Sentinels named then. Set Pool.Addr to name it otherwise.
//
// # Deadlines
//
// The core gives each Exec a context with the node timeout as its deadline,
// and stops waiting at that deadline whatever the Pool does. rueidis
// honours the deadline: a call to a server that has stopped answering
// returns context.DeadlineExceeded then, and rueidis drops the reply when
// it comes. ClientOption.ConnWriteTimeout (10 s by default) is how long
// rueidis waits on a silent connection before it closes it.
//
// The Pool does not implement driver.DeadlineHonorer, and so a
// redlock.Client of one such node still runs each operation on a goroutine
// of its own, bounded by the core's timer. rueidis keeps the deadline on the
// socket and while a command is queued, but not everywhere: a command that
// finds its connection being re-established by another command waits for
// that dial without looking at its own context (mux.go in v1.0.79), for as
// long as the other command's context and ClientOption.DialTimeout (5 s by
// default) allow, and the application's commands share the client.
//
// # Subscribe
//
// Subscribe takes a dedicated connection from the client (Client.Dedicate),
// sends SUBSCRIBE, calls ready once rueidis returns the server's
// confirmation, and delivers messages until ctx ends or the connection
// fails. A server that closes the connection ends it at once; one that
// stops answering, when rueidis's background PING has gone unanswered for
// ConnWriteTimeout, which is also how long it can take.
package rueidis

//go:generate go run gen_valkeygo.go
