// Package redlock implements Redlock, the distributed lock over N independent
// Redis masters.
//
// # The algorithm
//
// To acquire a lock on a key for a ttl, a Client:
//
//  1. sends SET key token NX PX ttl to every master in parallel, with a fresh
//     128-bit random token, each call bounded by the node timeout;
//  2. holds the lock once a majority, N/2+1, accepted; it stops waiting for
//     the rest, and gives up as soon as a majority is impossible;
//  3. counts the lock valid for ttl − elapsed − drift, with elapsed read from
//     the monotonic clock since before the first send and drift =
//     ttl×0.01 + 2ms; a majority reached after that window does not count;
//  4. on failure, releases the key on every node that may hold it before it
//     retries or returns;
//  5. extends and releases with compare-and-set scripts sent to every node,
//     so only the holder of the token can touch the key.
//
// Concurrent callers' commands to one master share round trips, so that the
// cost of a lock falls as the load grows. docs/algorithm.md in the
// repository maps each step to its code and gives the safety argument.
//
// # Other primitives
//
// Client.Semaphore is a counting semaphore on the same nodes: at most K
// holders of a key at once. Each node admits at most K holders, and a permit
// needs ⌊K·N/(K+1)⌋+1 nodes, which for K > 1 is more than a majority: K+1
// holders of that many nodes each would need more node slots than K·N. A
// semaphore made WithWeight(n) takes n of the K with each permit; the same
// count bounds the weights. See docs/semaphore.md. Client.RWMutex is a read-write lock:
// writers exclude everyone, readers only writers, on majorities, with a
// writer-intent mark against writer starvation (docs/rwlock.md).
// Client.Election elects a leader whose term is a fencing token from the
// quorum's counters (docs/election.md).
//
// # Contention
//
// A waiting acquisition of any primitive (Lock, the RWMutex's, the
// Semaphore's, Campaign) waits for its next timed attempt
// (WithRetryStrategy), but a release wakes it at once: releases publish the
// key on a pub/sub channel, and each Client keeps one subscription per node
// for all its waiters (WithWakeUp). An announcement only starts an ordinary
// attempt, never counts as a vote, and announcements that are not real
// releases cannot multiply a waiter's attempts. Every primitive runs on one
// engine, whose promises docs/engine.md states.
//
// # Drivers
//
// A Pool is one master: it sends a batch of commands and brings back the
// replies, and every deadline, count and undo stays in this package. The
// package github.com/quorumlock/redlock/redigo makes Pools on redigo, the
// root module's client; the modules .../goredis, .../rueidis and
// .../valkeygo adapt go-redis, rueidis and valkey-go clients, Redis Cluster
// clients included. An adapter author implements package driver, and
// redlocktest is the conformance kit every adapter passes. See
// docs/drivers.md.
//
// # Operating
//
// Client.Ping reports each node's health; Lock.Held and Lock.Margin say how
// many nodes hold a lock and how many more may fail; WithObserver (with
// observe.Slog, or the .../otel module) reports every attempt, node answer,
// acquisition, extension, loss and release; Client.Close ends waiting calls,
// leaderships and Do loops, and waits for the releases left running in the
// background, three node timeouts at most (ordinarily two).
// Releases are always sent, whatever
// the caller's ctx.
//
// # Guarantees
//
// While Lock.Until has not passed on the client's clock, no other client of
// this package can acquire the same key, provided that:
//
//   - the nodes' clocks run at most the drift factor faster than the client's
//     (WithDriftFactor); the client's clock may be stepped (validity is
//     measured on the monotonic clock), but a node's must not be: Redis
//     expires keys by its wall clock, and a step forward is a fast rate
//     concentrated in one instant;
//   - a node that restarts either keeps its keys (appendonly with fsync
//     always) or stays down for longer than the largest ttl in use;
//   - the masters are independent: not replicas of each other, and run
//     Redis 7.0 or later.
//
// # Limits
//
// The lock is only as good as the holder's discipline: a process that pauses
// (garbage collection, a stopped VM, a slow page fault) past Until keeps
// running while another client holds the lock. Check Until before each step
// that needs exclusion, Extend before it runs out, and treat ErrExpired as a
// sign that exclusion may have been lost. Against such a holder, make the
// Client WithFencing: each lock then carries a fencing token (Lock.Token) that
// grows across the whole quorum, and the protected resource rejects writes
// with a stale token (package fence). See docs/fencing.md.
//
// Every call is bounded in time: an acquisition attempt takes at most one node
// timeout (two with fencing), plus one more to release after a failure;
// Extend and Unlock take at most one node timeout. A node that accepts
// connections but never answers does not hold up any call beyond that.
package redlock
