package redlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/keys"
	"github.com/quorumlock/redlock/observe"
)

// Defaults for the options.
const (
	defaultTries         = 32
	defaultRetryDelayMin = 50 * time.Millisecond
	defaultRetryDelayMax = 250 * time.Millisecond
	defaultNodeTimeout   = 50 * time.Millisecond
)

// maxNodes is the most Redis masters a Client takes: each node has a bit in
// a 64-bit mask (Lock.overtaken).
const maxNodes = 64

// tokenBytes is the size of a lock token's random part: 128 bits.
const tokenBytes = 16

// A Client acquires locks on a fixed set of independent Redis masters.
// It is safe for concurrent use; create one and share it.
type Client struct {
	nodes              []*node
	quorum             int
	tries              int
	retryMin, retryMax time.Duration // Do's pause after a failed Extend
	retry              retryPolicy   // Lock's pauses
	retrySet           bool          // WithRetryStrategy was given, so retry must not be nil
	driftFactor        float64
	nodeTimeout        time.Duration
	clock              timeSource
	newToken           func() (string, error)
	ownTokens          bool                   // WithTokenFunc: newToken is the caller's
	lastToken          atomic.Pointer[string] // with ownTokens: the token made last (Client.token)
	fencing            bool
	replicaAcks        int                // WithReplicaAcks: replicas each write must reach to count
	obs                observe.Observer   // nil: no events are built
	observers          []observe.Observer // WithObserver's, joined into obs by New
	obsNil             bool               // WithObserver was given nil
	ids                atomic.Uint64      // the last call ID given out, for events

	keyPrefix   string // WithKeyPrefix: before every key on the nodes
	fencePrefix string // WithFencePrefix: the fencing counters' names (fenceKey)

	wakeOff bool   // WithWakeUp(false)
	wake    *waker // delivers release announcements; nil if off or no node is a driver.Subscriber
	channel any    // the key prefix and releaseChannelPrefix, as a command argument; "" with wake-up off

	calls   inflight      // node calls running, including those no caller waits for
	expiry  expiries      // ends its rounds' node contexts at their deadlines (quorum.go)
	closed  atomic.Bool   // Close has been called
	closing chan struct{} // closed by Close: wakes every waiting call (engine.go)
	closers closers       // what Close must end: leaderships, Do loops
}

// inflight counts running node calls. Unlike a sync.WaitGroup it may be
// waited for while calls start, as Close must allow; the wait polls, which
// costs nothing on the hot path.
type inflight struct{ n atomic.Int64 }

func (f *inflight) Add(k int) { f.n.Add(int64(k)) }
func (f *inflight) Done()     { f.n.Add(-1) }
func (f *inflight) Wait()     { f.wait(-1) }

// wait reports whether no call was running at some moment before limit
// passed; a negative limit waits for ever.
func (f *inflight) wait(limit time.Duration) bool {
	end := time.Now().Add(limit)
	for f.n.Load() > 0 {
		if limit >= 0 && time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// An Option configures a Client. Options are checked by New.
type Option func(*Client)

// WithTries sets how many attempts Lock makes before it gives up.
// The default is 32. n must be at least 1.
func WithTries(n int) Option {
	return func(c *Client) { c.tries = n }
}

// WithRetryDelay sets the range of the random pause between Lock's attempts.
// Each pause is drawn uniformly from [min, max], so that clients that
// collided do not collide again. The default is 50ms to 250ms. It replaces a
// strategy set by WithRetryStrategy before it; Do pauses in this range
// between failed extensions whatever Lock's strategy.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *Client) { c.retryMin, c.retryMax, c.retry, c.retrySet = min, max, nil, false }
}

// WithDriftFactor sets the fraction of the ttl reserved for clock drift
// between this client and the nodes. The default is 0.01.
// f must lie in [0, 1).
func WithDriftFactor(f float64) Option {
	return func(c *Client) { c.driftFactor = f }
}

// WithNodeTimeout bounds each node's part of an operation: connecting,
// sending and reading the reply. A node that takes longer counts as failed.
// The default, 50ms, suits loopback and LAN links with
// ttls of a second or more; it should be a small fraction of the ttl.
// d must be positive.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *Client) { c.nodeTimeout = d }
}

// withClock sets the clock used for validity. The default reads time.Now,
// which is monotonic. A nil clock is rejected (tests inject one through export_test.go).
func withClock(clock timeSource) Option {
	return func(c *Client) { c.clock = clock }
}

// WithTokenFunc sets the function that makes each acquisition's token. The
// default returns 128 random bits from crypto/rand, base64url-encoded. A
// replacement must return a value unique to each call: the token is what
// proves ownership to Extend and Unlock. A nil function is rejected.
//
// A token equal to the one the function returned just before is refused,
// as a failed token function is (an error wrapping ErrNotObtained, not
// retried), so that a function that returns a constant is caught at its
// second token, before a second holder shares the first one's identity.
func WithTokenFunc(f func() (string, error)) Option {
	return func(c *Client) { c.newToken, c.ownTokens = f, true }
}

// WithKeyPrefix puts prefix before every key given to this Client, on the
// nodes: a mutex's or an election's key is prefix+key, and the names derived
// from a key (fencing counters, the keys of RWMutex and Semaphore, the
// election's leader record) are made from prefix+key, which they hold
// inside their own name: "redlock:fence:{app:key}" for prefix "app:" (so a
// Redis ACL key pattern must allow "redlock:*" too). The release channels,
// "redlock:released:" followed by the node key, begin with the prefix too:
// "app:redlock:released:app:key" (an ACL channel pattern
// "&app:redlock:released:*" allows them). Keys given to the
// API, and reported by Lock.Key and to an observe.Observer, stay without
// it. Clients that share locks must use the same prefix. A prefix
// with a hash tag ("{app}:") puts all of the Client's keys in one Redis
// Cluster slot. The default is none.
func WithKeyPrefix(prefix string) Option {
	return func(c *Client) { c.keyPrefix = prefix }
}

// defaultFencePrefix begins the name of every fencing counter; see
// WithFencePrefix.
const defaultFencePrefix = keys.DefaultFencePrefix

// WithFencePrefix places the fencing counters (WithFencing): the counter of
// lock key k is prefix + "{k}", or prefix + k when k has a hash tag of its
// own, so that it shares k's Redis Cluster slot (Client.FenceKey). The
// default is "redlock:fence:". The prefix must be non-empty and contain no
// brace. Counters never expire (docs/fencing.md says what they cost and how
// to remove those of retired keys); changing the prefix starts every
// counter again from zero, which breaks the order of tokens across the
// change.
func WithFencePrefix(prefix string) Option {
	return func(c *Client) { c.fencePrefix = prefix }
}

// FenceKey returns the name of the fencing counter this Client keeps on
// every node for the lock key, with its key and fence prefixes.
func (c *Client) FenceKey(key string) string {
	if c == nil {
		return fenceKeyWith(defaultFencePrefix, key)
	}
	return fenceKeyWith(c.fencePrefix, c.keyPrefix+key)
}

// WithFencing makes every acquisition also issue a fencing token
// (Lock.Token): a number that grows with each lock granted on the key, across
// the whole quorum, so that a storage system can reject writes from a holder
// whose lock has passed (see Guard and docs/fencing.md). It costs a second
// round trip per acquisition and one counter key per lock key on each node.
// The default is off.
func WithFencing() Option {
	return func(c *Client) { c.fencing = true }
}

// WithReplicaAcks makes a node's vote count only once n of its replicas
// have the write: each acquiring SET (and fenced SET), each Extend and each
// raise of a fencing counter is followed, in the same Exec on the same
// connection, by WAIT n timeout, where timeout is half of what is
// left of the node timeout. A node whose WAIT reports fewer than n replicas
// fails with ErrReplicaAcks: it does not count toward the majority, and a
// lost round releases it like any failed node.
//
// It is for members that are a primary with replicas (behind Sentinel, or
// the shards of a Redis Cluster): without it, a primary that fails over
// right after it voted yes may promote a replica that never received the
// key, and the lock silently loses that vote (docs/operations.md). n must
// not exceed the replicas a member has, or no vote ever counts; WAIT also
// returns early once n replicas have the write, so the cost is one
// replication round trip per write (docs/benchmarks.md).
//
// Writes with the option go to the Pool as a batch of their own (a WAIT
// blocks its connection until the replicas answer, and must not hold up
// other callers' commands in a shared batch). Releases are not acknowledged:
// a release that a failover loses leaves the key to expire at its ttl. It
// covers the mutex (Lock, TryLock, Do, Extend, WithFencing) and what uses
// the mutex's scripts: an Election's leadership (a fenced mutex: its
// campaign and extensions; the leader record is written without WAIT), and
// an RWMutex writer's Extend and fencing round. The RWMutex's own scripts
// (its acquisitions, a reader's Extend) and the Semaphore's are sent
// without WAIT.
//
// The default, 0, sends no WAIT and costs nothing. n must not be negative.
func WithReplicaAcks(n int) Option {
	return func(c *Client) { c.replicaAcks = n }
}

// New returns a Client for the Redis masters behind pools, one Pool per
// independent master. A lock needs a majority, len(pools)/2+1, of them. An
// even count is allowed but buys nothing: four nodes tolerate one failure,
// like three.
//
// New makes no network calls. It returns an error wrapping ErrInvalid for no
// pools, a nil pool, or an invalid option.
func New(pools []Pool, opts ...Option) (*Client, error) {
	if len(pools) == 0 {
		return nil, invalid("no pools")
	}
	if len(pools) > maxNodes {
		return nil, invalid("%d pools: at most %d are supported", len(pools), maxNodes)
	}
	c := &Client{
		quorum:      quorum(len(pools)),
		tries:       defaultTries,
		retryMin:    defaultRetryDelayMin,
		retryMax:    defaultRetryDelayMax,
		driftFactor: defaultDriftFactor,
		nodeTimeout: defaultNodeTimeout,
		clock:       systemClock{},
		newToken:    randomToken,
		fencePrefix: defaultFencePrefix,
		closing:     make(chan struct{}),
	}
	for i, p := range pools {
		if isNil(p) {
			return nil, invalid("pool %d is nil", i)
		}
		if v, ok := p.(driver.Validator); ok {
			if err := v.Valid(); err != nil {
				return nil, invalid("pool %d: %v", i, err)
			}
		}
		n := newNode(i, p)
		for _, prev := range c.nodes {
			// One server counted twice would give it two votes.
			switch {
			case samePool(prev.pool, p):
				return nil, invalid("pools %d and %d are the same pool; each must be an independent master", prev.index, i)
			case n.name != "" && n.name == prev.name:
				return nil, invalid("pools %d and %d both reach %s; each must be an independent master", prev.index, i, n.name)
			}
		}
		c.nodes = append(c.nodes, n)
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, invalid("nil option")
		}
		opt(c)
	}
	switch {
	case c.tries < 1:
		return nil, invalid("tries %d must be at least 1", c.tries)
	case c.retryMin < 0 || c.retryMin > c.retryMax:
		return nil, invalid("retry delay range [%v, %v] must have 0 <= min <= max", c.retryMin, c.retryMax)
	case c.retryMax-c.retryMin == math.MaxInt64:
		// retryDelay draws from max−min+1 values, which must fit.
		return nil, invalid("retry delay range [%v, %v] is too wide", c.retryMin, c.retryMax)
	case !(c.driftFactor >= 0 && c.driftFactor < 1): // also rejects NaN
		return nil, invalid("drift factor %v must lie in [0, 1)", c.driftFactor)
	case c.nodeTimeout <= 0:
		return nil, invalid("node timeout %v must be positive", c.nodeTimeout)
	case c.replicaAcks < 0:
		return nil, invalid("replica acks %d must not be negative", c.replicaAcks)
	case isNil(c.clock):
		return nil, invalid("nil clock")
	case c.newToken == nil:
		return nil, invalid("nil token function")
	case c.obsNil:
		return nil, invalid("nil observer")
	case c.retrySet && isNil(c.retry):
		return nil, invalid("nil retry strategy")
	case c.fencePrefix == "":
		// "" + "{key}" would be the lock key itself for a key with a tag.
		return nil, invalid("empty fence prefix")
	case strings.ContainsAny(c.fencePrefix, "{}"):
		return nil, invalid("fence prefix %q must not contain '{' or '}': the counter takes the lock key's hash slot", c.fencePrefix)
	}
	c.obs = joinObservers(c.observers)
	if c.retry == nil {
		c.retry = jitterRetry{c.retryMin, c.retryMax}
	}
	for _, n := range c.nodes {
		n.acks = int64(c.replicaAcks)
	}
	if len(c.nodes) == 1 {
		c.nodes[0].pipe.oneNode = true      // pipe.go, "One wire under load"
		c.nodes[0].sole = c.nodes[0].inline // inline.go: queued commands keep their own deadline
	}
	c.channel = ""
	if !c.wakeOff {
		prefix := c.keyPrefix + releaseChannelPrefix
		c.channel = prefix
		for _, n := range c.nodes {
			if _, ok := n.pool.(driver.Subscriber); ok {
				c.wake = newWaker(c, prefix)
				break
			}
		}
	}
	return c, nil
}

// samePool reports whether a and b are the same Pool value. Values of a type
// that cannot be compared are taken to differ.
func samePool(a, b Pool) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// isNil reports whether v is nil or a typed nil pointer, which would panic on
// first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Lock acquires the lock on key for ttl. It retries after a pause
// (WithRetryDelay, WithRetryStrategy) until it holds the lock, the tries run
// out (WithTries), the strategy gives up, or ctx ends. While it waits, a
// release of key on enough nodes wakes it for an extra attempt at once
// (WithWakeUp, on by default with pools that are Subscribers); such
// attempts do not count as tries, and within one pause each starts at least
// rtt×2^k after the one before (k woken attempts so far in the pause), so
// that announcements that are not real releases add at most
// 1+log2(pause/rtt) attempts per pause. A woken attempt that lost to a new
// holder (another token than the last it saw holds the key on a majority:
// the lock changed hands) is not counted in k, so that a waiter is not held
// back by the hand-overs it lost; to tell, once Lock waits for wake-ups,
// its SETs ask each node for the key's holder (SET ... NX GET), unless the
// Client fences or waits for replica acknowledgements. Close
// ends the wait at once with an error wrapping ErrClosed. It does not retry
// failures that are not contention, which would only repeat: a token
// function that fails, or so many nodes refusing the command itself
// (NOPERM, NOAUTH, WRONGPASS, READONLY, OOM, WRONGTYPE, CROSSSLOT) that no
// majority is possible.
//
// On success the lock is valid until Lock.Until. On failure it returns an
// error wrapping ErrNotObtained with the per-node causes, plus ctx.Err() if
// ctx ended; every attempt has released whatever it acquired (step 4).
// Bad arguments return an error wrapping ErrInvalid and make no network call.
//
// Each attempt takes at most one node timeout, or two when it fails and must
// release the nodes that may hold the key; with WithFencing, one more for
// the second round. Lock takes at most its pauses plus 2×tries−1 attempts:
// the timed ones, and in each pause at most one woken attempt that runs past
// the pause's end.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.lock(ctx, key, ttl, c.tries, c.fencing)
}

// TryLock makes exactly one attempt to acquire the lock on key for ttl; see
// Lock for what happens on each path.
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.lock(ctx, key, ttl, 1, c.fencing)
}

// lock is Lock and TryLock; fencing is the Client's WithFencing, or true for
// an election, whose terms are fencing tokens. The loop is the engine's
// (acquireLoop); an attempt is acquire.
func (c *Client) lock(ctx context.Context, key string, ttl time.Duration, tries int, fencing bool) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	ttl, err := c.check(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if err := c.closedErr(); err != nil {
		return nil, err
	}
	return c.acquireLoop(ctx, &acquisition{
		key: key, wake: []string{c.keyPrefix + key}, tries: tries,
		holders: !fencing && c.replicaAcks == 0, // a fenced or acked SET reads no holder
		attempt: func(ctx context.Context, a attemptInfo) (*Lock, uint64, error) {
			return c.acquire(ctx, key, ttl, a.id, fencing, a.holder)
		},
	})
}

// notAcquired reports a Lock that gave up to the observe.Observer and returns err.
func (c *Client) notAcquired(ctx context.Context, id uint64, key string, tries int, began time.Time, err error) error {
	if c.obs != nil {
		c.obs.Observe(ctx, observe.Event{Kind: observe.KindNotAcquired, ID: id, Key: key, Try: tries, Wait: time.Since(began), Err: err})
	}
	return err
}

// check validates the arguments common to every call and returns the ttl
// truncated to the milliseconds Redis can express.
func (c *Client) check(ctx context.Context, key string, ttl time.Duration) (time.Duration, error) {
	if ctx == nil {
		return 0, invalid("nil context")
	}
	if key == "" {
		return 0, invalid("empty key")
	}
	if ttl <= 0 {
		return 0, invalid("ttl %v must be positive", ttl)
	}
	ttl = truncateTTL(ttl)
	if d := drift(ttl, c.driftFactor); ttl <= d {
		return 0, invalid("ttl %v must exceed the clock drift allowance %v", ttl, d)
	}
	return ttl, nil
}

// retryDelay is Do's pause after a failed extension.
func (c *Client) retryDelay() time.Duration {
	return jitterRetry{c.retryMin, c.retryMax}.Delay(0)
}

// A tokenError is the failure of the token function: not contention, so
// Lock does not retry it. It wraps ErrNotObtained and the function's error.
type tokenError struct{ err error }

func (e *tokenError) Error() string {
	return "redlock: lock not obtained: making a token: " + e.err.Error()
}
func (e *tokenError) Unwrap() []error { return []error{ErrNotObtained, e.err} }

// token makes an acquisition's token (or an RW waiter's mark) with the
// token function; its error is a *tokenError. Every primitive takes its
// tokens here. A token is a holder's identity on the nodes: two holders
// with one token would each release or extend the other's key (an expired
// handle freeing the next holder's lock) or share one member of a set (two
// readers counted as one). So a token function of the caller's that
// returns the token it returned last is refused; the default one draws 128
// random bits and is not checked.
func (c *Client) token() (string, error) {
	token, err := c.newToken()
	switch {
	case err != nil:
		return "", &tokenError{err}
	case token == "":
		return "", &tokenError{errors.New("empty token")}
	case c.ownTokens:
		if last := c.lastToken.Swap(&token); last != nil && *last == token {
			return "", &tokenError{fmt.Errorf("token %q repeats the one before: the token function must return a new token for every attempt (WithTokenFunc)", token)}
		}
	}
	return token, nil
}

// attemptToken is token for an attempt of acquireLoop that has no giveUp
// (the mutex's, Campaign's, the Semaphore's): the loop holds a count among
// Close's calls, which is let go while a token function of the program's
// own (WithTokenFunc) runs, as retryDelayFor lets it go around a
// RetryStrategy, and for the same reasons.
func (c *Client) attemptToken() (string, error) {
	if c.ownTokens {
		c.calls.Done()
		defer c.calls.Add(1)
	}
	return c.token()
}

// acquire is one attempt of the algorithm, steps 1 to 4, with the fencing
// rounds of docs/fencing.md when enabled. A failed attempt also returns the
// nodes that agreed to its SET before it let them go (wake.go). With holder
// set (never with fencing or replica acks: lock), its SETs ask the nodes
// for the key's holder (SET ... GET), and a failed attempt sets *holder to
// the token that refused it on a quorum, or "" if no token did
// (acquireLoop's cap).
func (c *Client) acquire(ctx context.Context, key string, ttl time.Duration, id uint64, fencing bool, holder *string) (*Lock, uint64, error) {
	token, err := c.attemptToken()
	if err != nil {
		return nil, 0, err
	}

	// The Lock holds the command arguments, so that they are made once, in
	// the same allocation; it is dropped if the attempt fails.
	nodeKey := c.keyPrefix + key
	l := &Lock{client: c, key: key, token: token, args: newCmdArgs(nodeKey, token, ttl, c.channel)}
	args := &l.args
	if holder != nil {
		args.refused = new(refusals)
	}
	start := c.clock.Now() // step 3: elapsed time counts from before the first send
	until := validUntil(start, ttl, c.driftFactor)
	valid := func() bool { return c.clock.Now().Before(until) }
	release := func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
		return n.release(ctx, deadline, args)
	}

	set := func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
		return n.setNX(ctx, deadline, args)
	}
	highest := &l.highest // fencing: the highest counter among nodes that accepted
	if fencing {
		args.fenceKey = fenceKeyWith(c.fencePrefix, nodeKey)
		set = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			counter, ok, err := n.setNXFenced(ctx, deadline, args)
			if ok {
				highest.raise(counter)
			}
			return ok, err
		}
	}
	args.unsent.Store(1<<len(c.nodes) - 1) // no SET has entered a pipe yet
	held := &args.masks                    // the round whose agreement makes the lock held
	if fencing {
		held = &l.fenced
	}
	if c.obs != nil {
		held.report = func() { c.reportSettled(ctx, l, observe.OpAcquire, id, held) }
	}
	var async *asyncOp // set without a goroutine per node (quorum.go)
	if !fencing {
		async = args.setNXAsync()
	}
	won, t := c.fanout(ctx, round{op: set, async: async, undo: release, valid: valid, overtaken: l,
		kind: observe.OpAcquire, key: key, id: id, masks: &args.masks})
	if !won {
		if args.refused != nil {
			*holder = args.refused.holder(c.quorum)
		}
		return nil, args.masks.agreed.Load(), t.err(ErrNotObtained)
	}
	l.held.Store(&args.masks)
	if !fencing {
		c.settleWon(&args.masks)
	}

	if fencing {
		if c.closedBetweenRounds(ctx, l, release) {
			return nil, 0, errClosedBetweenRounds
		}
		// Fencing, round 2: the token exceeds every counter the majority
		// reported, and counts only once a majority stored it while still
		// holding the key, within the same validity window.
		l.fence = highest.load() + 1
		raise := func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.raiseFence(ctx, deadline, args, l.fence)
		}
		won, t = c.fanout(ctx, round{
			op: raise,
			// If lost, release every node: a round-1 SET may still be on its
			// way to a node that refused here. Letting go first makes a SET
			// that enters its pipe after these releases release itself.
			undo:    release,
			undoAll: true,
			lost:    l.letGo,
			valid:   valid,
			kind:    observe.OpFence,
			key:     key,
			id:      id,
			masks:   &l.fenced,
		})
		if !won {
			return nil, args.masks.agreed.Load(), t.err(ErrNotObtained)
		}
		l.held.Store(&l.fenced) // held means: holds the key with the token counted
		c.settleWon(&l.fenced)
	}
	if c.obs != nil {
		l.granted, l.id = time.Now(), id
	}
	l.until = until
	return l, 0, nil
}

// maxCounter keeps the largest value it was given; safe for concurrent use.
type maxCounter struct{ v atomic.Uint64 }

func (m *maxCounter) raise(x uint64) {
	for {
		cur := m.v.Load()
		if x <= cur || m.v.CompareAndSwap(cur, x) {
			return
		}
	}
}

func (m *maxCounter) load() uint64 { return m.v.Load() }

func randomToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// A Lock is a held lock: a key set to a token on a majority of nodes; a
// holder's part of an RWMutex (a writer's key, or a reader's place in the
// readers set, on a majority); or a Semaphore's permit (its token in the
// semaphore's set on the semaphore's quorum). Its methods are safe for
// concurrent use. The nil *Lock that a failed call returns holds nothing:
// Until is zero, Done is closed, and Extend and Unlock return an error
// wrapping ErrInvalid. The lock is exclusive (a permit, one of at most K)
// only until Until; work that may outlast it must Extend first, and must
// stop if Extend fails.
type Lock struct {
	client  *Client
	key     string
	token   string
	fence   uint64     // fencing token; 0 without WithFencing
	highest maxCounter // while acquiring with fencing: the highest counter read
	args    cmdArgs    // key and token as command arguments (ttl: the first one's)
	ops     *holdOps   // how Extend and Unlock act on a node; nil: on a key set to the token
	need    int        // nodes that must hold it; 0: the Client's majority (Lock.quorum)
	permits int        // a permit's semaphore's K, for its errors; 0 otherwise

	mu       sync.Mutex
	until    time.Time     // zero once Unlock has begun
	released bool          // an Unlock reached a majority
	lost     bool          // an Extend's refusals proved the lock gone (verdict): until was cut to then
	done     chan struct{} // made by Done; closed when until passes or on release
	expiry   *time.Timer   // closes done when until passes

	// overtaken has a bit for each node whose acquiring SET had not entered
	// the node's pipe when the lock was let go: a release may have gone
	// ahead of it there. See round.overtaken.
	overtaken atomic.Uint64
	letGone   atomic.Bool   // letGo has run
	deleted   atomic.Uint64 // nodes where an Unlock deleted the key
	unsure    atomic.Uint64 // nodes where an Unlock's release failed: it may have run
	evidence  atomic.Uint64 // nodes whose first release found the key gone while valid

	// held points to the masks of the latest successful acquisition round
	// or Extend (Held, Margin); fenced is fencing round 2's.
	held    atomic.Pointer[nodeMasks]
	fenced  nodeMasks
	granted time.Time // when Lock returned it, with an observe.Observer (HeldFor)
	id      uint64    // the acquiring call's ID, with an observe.Observer
}

// Held returns how many nodes hold the key with this lock's token, as far as
// the lock knows: the nodes that agreed to its acquisition or to its latest
// successful Extend (with WithFencing, to the round that stored its fencing
// token). Lock and Extend return as soon as a majority agreed; nodes that
// answer later are counted as they answer, so Held may rise for up to a
// node timeout after the call. It is 0 for the nil *Lock.
func (l *Lock) Held() int {
	if l == nil || l.client == nil {
		return 0
	}
	if m := l.held.Load(); m != nil {
		return bits.OnesCount64(m.agreed.Load())
	}
	return 0
}

// Margin returns how many more nodes may fail before the lock no longer
// stands on a majority: the nodes that hold the key or have not answered
// yet, less the quorum. 0 means the lock stands on a bare majority, one
// node failure from loss: the deployment is degraded. It counts the latest
// successful acquisition or Extend, and falls as nodes still in flight
// fail. With one node, or two, it is always 0.
func (l *Lock) Margin() int {
	if l == nil || l.client == nil {
		return 0
	}
	m := l.held.Load()
	if m == nil {
		return 0
	}
	n := len(l.client.nodes)
	pending := n - bits.OnesCount64(m.answered.Load())
	return bits.OnesCount64(m.agreed.Load()) + pending - l.quorum()
}

// letGo records, before any release is sent, which nodes' SETs a release
// could overtake: those not yet in their pipe. With seq-cst atomics, a SET
// that enters its pipe after a release did finds its bit here when it
// returns (it cleared unsent after this load, and reads overtaken after).
func (l *Lock) letGo() {
	l.letGone.Store(true)
	l.overtaken.Or(l.args.unsent.Load())
}

// overtakenAt reports whether node's acquiring SET may have reached the node
// after a release: it was not in the pipe when the lock was let go, or it
// was resent (by EVAL after NOSCRIPT, or as plain SET NX after a refused
// SET ... NX GET: later than its bit in unsent says) and the lock has been
// let go.
func (l *Lock) overtakenAt(node int) bool {
	bit := uint64(1) << node
	return l.overtaken.Load()&bit != 0 || (l.args.fellBack.Load()&bit != 0 && l.letGone.Load())
}

// Key returns the locked key.
func (l *Lock) Key() string {
	if l == nil || l.client == nil {
		return ""
	}
	return l.key
}

// Value returns the token that marks this acquisition on each node.
func (l *Lock) Value() string {
	if l == nil || l.client == nil {
		return ""
	}
	return l.token
}

// Token returns the lock's fencing token, or 0 if the Client was made
// without WithFencing. Tokens of successive locks on a key grow strictly in
// the order the locks were granted, under the assumptions in docs/fencing.md.
// Pass it with every write to a resource that the lock protects, and let the
// resource reject tokens lower than the highest it has seen (Guard).
func (l *Lock) Token() uint64 {
	if l == nil || l.client == nil {
		return 0
	}
	return l.fence
}

// Until returns the end of the validity window, on the client's clock: the
// lock is proven exclusive before this instant and not after. It returns the
// zero Time once the lock has been released.
func (l *Lock) Until() time.Time {
	if l == nil || l.client == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Done returns a channel that is closed when the lock's validity ends, that is
// when Until passes on the client's clock, or when Unlock releases the lock.
// Successful Extends push the closing back; a failed Extend may bring it
// forward. Once closed it stays closed, even if an Extend that was in flight
// at that moment succeeds: the holder must treat the lock as lost.
//
// Done reflects Until: it is closed no earlier than Until passes (the wait is
// measured on the Clock and slept in real time) and at most a timer's latency
// after. Closing the channel is all it does; it makes no network call. The
// timer behind it is stopped once the channel is closed.
func (l *Lock) Done() <-chan struct{} {
	if l == nil || l.client == nil {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		l.watchLocked()
	}
	return l.done
}

// closedChan is the Done channel of the nil *Lock: it holds nothing.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// setUntilLocked moves the end of validity and re-arms Done's timer.
// l.mu must be held.
func (l *Lock) setUntilLocked(until time.Time) {
	l.until = until
	l.watchLocked()
}

// watchLocked closes done if validity has ended, and otherwise arms the timer
// for the time left. It does nothing before Done is first called, or after
// done was closed. l.mu must be held.
func (l *Lock) watchLocked() {
	if l.done == nil {
		return
	}
	select {
	case <-l.done:
		return
	default:
	}
	left := l.until.Sub(l.client.clock.Now())
	if l.until.IsZero() || left <= 0 {
		close(l.done)
		if l.expiry != nil {
			l.expiry.Stop()
		}
		return
	}
	if l.expiry == nil {
		l.expiry = time.AfterFunc(left, l.expire)
		return
	}
	l.expiry.Reset(left)
}

// expire runs when Done's timer fires. An Extend may have moved until since
// the timer was armed, so it checks again rather than closing outright.
func (l *Lock) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchLocked()
}

// Extend makes the key live at least ttl from now on every node that still
// holds the lock's token (step 5); it never shortens a key (PEXPIRE GT,
// Redis 7). It succeeds when a majority did so while both the old validity
// window and the new one were open; the new one runs to start+ttl−drift,
// start being when Extend began.
//
// If the lock's validity has already passed, Extend returns ErrExpired and
// sends nothing; if it was released, ErrReleased; if the Client is closed,
// ErrClosed. If a majority agrees only after the validity has passed,
// Extend returns ErrExpired too; Until never moves forward once it has
// passed. If no majority extends in time, it returns an error wrapping
// ErrNotObtained, and Until becomes the earlier of the old and the new
// deadline: the holder asked for no more than ttl from now. The error also
// wraps ErrLockLost when the nodes' answers prove the lock gone: so many of
// them found the key gone or another token's that fewer than a majority can
// hold it. Then Until becomes the moment of that verdict, and Done closes:
// the lock is no longer exclusive.
//
// A node that answers, before the majority is reached, that it has no key
// at all (it restarted without its data, or evicted the key) is re-seeded
// once the Extend has won and its verdict is applied: it gets the key back
// with the lock's own token, by SET NX, and with fencing its counter is
// raised to the lock's token, so that Held counts it again
// (docs/algorithm.md, "Re-seeding on Extend"). Re-seeding never changes
// the verdict, and runs within ctx's deadline. Extend takes at most one
// node timeout, or two when it re-seeds, and never runs past ctx's
// deadline.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.client.usable() != nil {
		return errNilLock
	}
	c := l.client
	ttl, err := c.check(ctx, l.key, ttl)
	if err != nil {
		return err
	}
	if err := c.closedErr(); err != nil {
		return err
	}
	var began time.Time
	id := c.newID()
	if c.obs != nil {
		began = time.Now()
	}
	err = l.extend(ctx, ttl, id)
	if c.obs != nil {
		if err == nil {
			c.obs.Observe(ctx, observe.Event{Kind: observe.KindExtended, ID: id, Key: l.key, Latency: time.Since(began),
				Held: l.Held(), Margin: l.Margin(), Quorum: l.quorum()})
		} else {
			c.obs.Observe(ctx, observe.Event{Kind: observe.KindExtendFailed, ID: id, Key: l.key, Latency: time.Since(began), Err: err})
		}
	}
	return err
}

// quorum is how many nodes must hold the lock: the Client's majority, or a
// semaphore's quorum for a permit.
func (l *Lock) quorum() int {
	if l.need > 0 {
		return l.need
	}
	return l.client.quorum
}

// goneText says that so many nodes no longer hold the lock (n of them, out
// of total) that fewer than the quorum can.
func (l *Lock) goneText(n, total int) string {
	if l.permits > 0 {
		return fmt.Sprintf("the permit's token is gone from %d of %d nodes, so fewer than the quorum of %d can hold it", n, total, l.quorum())
	}
	return fmt.Sprintf("the key is gone or held by another token on %d of %d nodes", n, total)
}

// extend is the engine's keep step for every holder: the node operation is
// the primitive's (l.ops), the quorum its own (l.quorum).
func (l *Lock) extend(ctx context.Context, ttl time.Duration, id uint64) error {
	c := l.client
	start := c.clock.Now()
	l.mu.Lock()
	old, released := l.until, l.released
	l.mu.Unlock()
	if released {
		return ErrReleased
	}
	if !start.Before(old) {
		return ErrExpired
	}
	until := validUntil(start, ttl, c.driftFactor)
	args := &cmdArgs{key: l.args.key, token: l.args.token, ttl: ttl.Milliseconds(), lane: l.args.lane, fenceKey: l.args.fenceKey}
	if c.obs != nil {
		args.masks.report = func() { c.reportSettled(ctx, l, observe.OpExtend, id, &args.masks) }
	}
	var absent atomic.Uint64 // nodes that answered that they have no key (l.reseed)
	won, t := c.fanout(ctx, round{
		kind: observe.OpExtend, key: l.key, id: id, masks: &args.masks, need: l.need,
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			ok, gone, err := l.extendOn(ctx, n, deadline, args)
			if gone {
				absent.Or(1 << n.index)
			}
			return ok, err
		},
		// A majority counts only while the old window is still open, too:
		// once it has closed, the lock was unproven for a while, and
		// Until must not move forward again.
		valid: func() bool { now := c.clock.Now(); return now.Before(until) && now.Before(old) },
	})

	err := l.verdict(won, t, &args.masks, until, old)
	if err == nil {
		// After the verdict, never before it: re-seeding cannot turn a won
		// Extend into a loss, nor delay the moment Until moves.
		l.reseed(ctx, args, until, absent.Load())
	}
	return err
}

// verdict applies an Extend's result to the lock and returns Extend's
// error: until is the new window's end, old the one before.
func (l *Lock) verdict(won bool, t tally, masks *nodeMasks, until, old time.Time) error {
	c := l.client
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.released:
		return ErrReleased
	case l.until.IsZero(): // an Unlock began while extending
		return ErrExpired
	case won && !c.clock.Now().Before(l.until):
		// The window closed while the answers came in: Until never moves
		// forward once it has passed, so Done and Until stay consistent.
		return ErrExpired
	case won:
		l.setUntilLocked(until)
		l.held.Store(masks)
		masks.settle() // won
		return nil
	default:
		// Keys are never shortened (PEXPIRE GT), so the old window still
		// holds; but the holder asked for no more than ttl from now.
		if until.Before(l.until) {
			l.setUntilLocked(until)
		}
		if t.late && !c.clock.Now().Before(old) {
			return aggregate(ErrExpired, t.causes)
		}
		if now := c.clock.Now(); t.lost() && now.Before(old) {
			// Refusals that all came while the lock was still valid: a key
			// that expired at its ttl would prove nothing. They prove that
			// fewer than a majority can hold it: its validity ends now, and
			// Done closes, so that a holder checking Until or Done stops.
			l.lost = true
			l.setUntilLocked(now)
			return aggregate(&tagged{text: prefix + "lock lost: the extension was refused: " + l.goneText(t.refused(), t.n),
				is: []error{ErrLockLost, ErrNotObtained}}, t.causes)
		}
		return t.err(ErrNotObtained)
	}
}

// reseed gives the key back to the nodes in absent, which answered an
// Extend that a majority granted that they had no key (docs/algorithm.md,
// "Re-seeding on Extend"): a node that restarted empty gets SET key token
// NX PX ttl, with the lock's own token and the Extend's ttl (args), so that
// one restart does not leave the lock standing on a bare majority until it
// ends. The mutex's holders only: other primitives' keys are not a plain
// key set to the token.
//
// It runs once the Extend has won and its verdict is applied, while the
// lock is valid (until is the Extend's validity): some majority held the
// key at every instant since the acquisition, which proves that no one else
// can have held it, and a SET NX on a node where the key is gone is then
// exactly an acquisition's SET, which takes nothing from anyone. With
// fencing, the node's counter is raised to the lock's token too (a
// max-register: never lowered).
//
// It sends in parallel and waits for the answers until the node deadline
// of ctx: one node timeout, or ctx's deadline if sooner, or until ctx is
// cancelled; it sends nothing once ctx has ended. A re-seed that an Unlock overtakes would leave the
// released token on the node for a whole ttl, so each node's re-seed, once
// it returns, is undone by a release of its own if the lock has been let
// go meanwhile (the rule of round.overtaken): that release follows the SET
// in the node's lane, and deletes the key only if it still holds this
// token.
func (l *Lock) reseed(ctx context.Context, args *cmdArgs, until time.Time, absent uint64) {
	c := l.client
	if absent == 0 || l.ops != nil || l.letGone.Load() || ctx.Err() != nil {
		return
	}
	deadline := c.nodeDeadline(ctx)
	// The SETs' context ends at the deadline, or once the last has
	// returned, not when reseed returns: a SET still queued in its node's
	// pipe may lead a batch of other callers' commands, which go out under
	// the leader's context (pipe.go). left counts the SETs running, and
	// this call until it has started them all.
	opCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	var left atomic.Int32
	left.Store(1)
	end := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	done := make(chan struct{}, len(c.nodes))
	sent := 0
	for _, n := range c.nodes {
		if absent&(1<<n.index) == 0 || !c.clock.Now().Before(until) {
			continue
		}
		sent++
		c.calls.Add(1)
		left.Add(1)
		go func() {
			defer c.calls.Done()
			defer end()
			defer func() { done <- struct{}{} }()
			if hook := testHookReseed.Load(); hook != nil {
				(*hook)(l, n.index)
			}
			ok, err := n.setNX(opCtx, deadline, args)
			if ok && err == nil && l.fence != 0 {
				ok, err = n.raiseFence(opCtx, deadline, args, l.fence)
				if errors.Is(err, errFenceAhead) {
					ok, err = true, nil // the key is ours; the counter is already past the token
				}
			}
			if (ok || err != nil) && l.letGone.Load() {
				// Overtaken by a release: let go of what this SET may hold.
				c.undoLate(ctx, round{undo: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
					return n.release(ctx, deadline, &l.args)
				}}, n)
				return
			}
			if ok && err == nil {
				args.masks.agreed.Or(1 << n.index) // Held and Margin count it
			}
		}()
	}
	end()
	for range sent {
		select {
		case <-done:
		case <-opCtx.Done():
			return
		case <-ctx.Done(): // the caller stopped waiting (Resign, Do's fn returned): the SETs go on
			return
		}
	}
}

// testHookReseed, if set, runs in each node's re-seed before it sends.
// Tests use it to hold a re-seed back while an Unlock runs.
var testHookReseed atomic.Pointer[func(l *Lock, node int)]

// Unlock releases the lock: it deletes the key on every node where it still
// holds this lock's token, and never touches another holder's key. It returns
// once a majority of nodes deleted it, which frees the lock for others; the
// remaining nodes are released in the background within one node timeout.
//
// The release is always sent, whatever ctx says: a ctx that has ended (the
// common `defer l.Unlock(ctx)` with a request's context) neither skips nor
// cuts it short. It is detached from ctx's cancellation and deadline, and
// bounded by one node timeout instead. It is sent on a closed Client too.
//
// From the moment Unlock begins, the lock no longer counts as held: Until
// returns the zero Time and Done is closed, even if Unlock then fails,
// because its releases may have reached a majority whose replies were lost.
// On each path:
//   - A majority deleted the key: nil. A retry of an Unlock that failed
//     counts the nodes that deleted it the first time.
//   - An earlier Unlock was already confirmed by a majority: ErrReleased.
//     The release is sent again all the same, which frees any node the
//     first one missed.
//   - So many nodes answered that the key was gone or held another token
//     (it expired, was evicted, was lost in a restart, or was overwritten)
//     that fewer than a majority can have held it: an error wrapping
//     ErrLockLost, even within the validity window, because the critical
//     section may not have been exclusive. So does the Unlock of a lock
//     that an Extend has already proved lost.
//   - Too few nodes answered: an error saying the release was not
//     confirmed, with the per-node causes, and ctx.Err() if ctx had ended;
//     the key expires on the silent nodes at its ttl, and Unlock may be
//     called again.
//   - The lock's validity had already passed: the release is still sent, but
//     Unlock returns ErrExpired: the holder must learn that its critical
//     section may not have been exclusive.
//
// Unlock takes at most one node timeout.
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil || l.client.usable() != nil {
		return errNilLock
	}
	if ctx == nil {
		return invalid("nil context")
	}
	return l.unlockThen(ctx, nil)
}

// unlockThen is Unlock for a Lock and ctx already checked; then, if set,
// runs between the release and its event for the Observer.
func (l *Lock) unlockThen(ctx context.Context, then func()) error {
	c := l.client
	var began time.Time
	if c.obs != nil {
		began = time.Now()
	}
	id := c.newID() // 0 without an Observer
	err := l.unlock(ctx, id)
	if then != nil {
		then()
	}
	switch {
	case c.obs == nil:
	case err == nil:
		c.obs.Observe(ctx, observe.Event{Kind: observe.KindReleased, ID: id, Key: l.key, Latency: time.Since(began), HeldFor: began.Sub(l.granted)})
	default:
		c.obs.Observe(ctx, observe.Event{Kind: observe.KindReleaseFailed, ID: id, Key: l.key, Latency: time.Since(began), Err: err})
	}
	return err
}

// unlock is the engine's release for every holder: the node operation is
// the primitive's (l.ops), the quorum its own (l.quorum), and the round is
// always sent (releaseRound).
func (l *Lock) unlock(ctx context.Context, id uint64) error {
	c := l.client
	l.letGo()
	// The lock counts as released from here on, whatever the nodes answer:
	// the releases may delete the key on a majority even if their replies
	// are lost, so Until and Done must not go on saying it is held.
	l.mu.Lock()
	again, lost := l.released, l.lost
	// A retry after a failed Unlock finds until already zero: not expired.
	expired := !again && !l.until.IsZero() && !c.clock.Now().Before(l.until)
	until := l.until
	l.setUntilLocked(time.Time{})
	l.mu.Unlock()
	// A node's refusal is evidence that the lock was lost only if it came
	// before the lock's validity ended (a key that expired at its ttl
	// proves nothing), from the node's first release (a release that
	// failed may have run and lost only its reply, and after it anything
	// may have happened to the key). Any other refusal counts as a
	// release: a retry never mistakes its own earlier deletions for a
	// loss, and may miss a loss it cannot prove.
	unsure := l.unsure.Load() // the nodes whose release has failed before
	account := func(n *node, deleted bool, err error) (bool, error) {
		bit := uint64(1) << n.index
		switch {
		case deleted:
			l.deleted.Or(bit)
		case err != nil:
			l.unsure.Or(bit)
		case unsure&bit == 0 && !until.IsZero() && c.clock.Now().Before(until):
			l.evidence.Or(bit)
		}
		return err == nil && (l.deleted.Load()&bit != 0 || l.evidence.Load()&bit == 0), err
	}
	var async *asyncOp // released without a goroutine per node (quorum.go)
	if l.ops == nil {
		async = releaseOwnedAsync(&l.args, account)
	}
	won, t := c.releaseRound(ctx, round{
		kind: observe.OpRelease, key: l.key, id: id, need: l.need, async: async,
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			deleted, err := l.releaseOn(ctx, n, deadline, &l.args)
			return account(n, deleted, err)
		},
	})
	if won {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	gone := bits.OnesCount64(l.evidence.Load())
	switch {
	case again:
		return ErrReleased
	case lost: // an Extend proved it, and cut the validity short
		return aggregate(fmt.Errorf("%w: an extension's refusals proved it gone before its validity ended", ErrLockLost), t.causes)
	case expired:
		return aggregate(ErrExpired, t.causes)
	case !won && gone > t.n-t.quorum:
		what := "the critical section may not have been exclusive"
		if l.permits > 0 {
			what = fmt.Sprintf("it may not have been within the %d permits", l.permits)
		}
		return aggregate(fmt.Errorf("%w: %s at release, before its validity ended: %s",
			ErrLockLost, l.goneText(gone, t.n), what), t.causes)
	case !won:
		return t.err(errNotReleased)
	}
	return nil
}

// errNilLock is what Extend and Unlock return on the nil *Lock of a failed
// Lock, instead of panicking.
var errNilLock = invalid("nil *Lock: the Lock call that returned it failed")

// errNotReleased heads the error of an Unlock that reached too few nodes.
var errNotReleased = errors.New("redlock: release not confirmed")
