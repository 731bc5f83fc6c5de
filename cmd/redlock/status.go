package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/keys"
	"github.com/quorumlock/redlock/redigo"
)

const statusUsage = `usage: redlock status --key K [flags]

Shows, for each node in --nodes, whether it holds K, a prefix of the holder's
token (never the whole of it: the token is what lets its holder release the
lock), the remaining ttl and the fencing counter; then the verdict: held by
a majority, free, or split (some nodes hold a token, but no token is on a
majority).

If K is the key of a semaphore, a read-write lock or an election's leader
record rather than a lock, status says what it is. It also names the
semaphore, read-write lock and election that use K as their name.

Exit codes: 0 a verdict was reached, whatever it is (held, free, split, or
not a lock key); 64 bad usage; 69 too many nodes did not answer to tell
whether a majority holds K.

The user needs +get +pttl on K and on redlock:fence:* keys (read access,
e.g. %R~*).

Environment: REDLOCK_NODES (default for --nodes), REDLOCK_PASSWORD (the
password for --user, or for the default user).

Flags:
`

type statusConfig struct {
	nodes       []string
	conn        *conn
	key         string
	keyPrefix   string
	json        bool
	nodeTimeout time.Duration
}

// redisKey is the key on the nodes: --key-prefix and --key.
func (c *statusConfig) redisKey() string { return c.keyPrefix + c.key }

// statusMain parses status's flags, reads K on every node and prints what
// it found.
func statusMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseStatus(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock status: %v\n", err)
		return exitUsage
	}
	nodes := readStatus(cfg)
	v := judge(nodes)
	if cfg.json {
		if err := printStatusJSON(stdout, cfg, nodes, v); err != nil {
			fmt.Fprintf(stderr, "redlock status: %v\n", err)
			return 1
		}
	} else {
		printStatus(stdout, cfg, nodes, v)
	}
	if v.kind == verdictUnknown {
		return exitUnavailable
	}
	return 0
}

func parseStatus(args []string, getenv func(string) string, stderr io.Writer) (*statusConfig, error) {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, statusUsage)
		printFlags(fs, stderr)
	}
	cf := addConnFlags(fs)
	cfg := &statusConfig{}
	fs.StringVar(&cfg.key, "key", "", "the lock's `key` (required)")
	fs.StringVar(&cfg.keyPrefix, "key-prefix", "", "`prefix` of every key on the nodes, as the clients' WithKeyPrefix")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object instead of the table")
	fs.DurationVar(&cfg.nodeTimeout, "node-timeout", time.Second, "bound on each node's answer, up to 1m")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if cfg.nodes, err = cf.nodeList(getenv); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q (status takes flags only)", fs.Arg(0))
	case cfg.key == "":
		return nil, errors.New("--key is required")
	case cfg.nodeTimeout <= 0 || cfg.nodeTimeout > time.Minute:
		return nil, fmt.Errorf("--node-timeout %v must be positive and at most 1m", cfg.nodeTimeout)
	}
	if cfg.conn, err = cf.dial(getenv); err != nil {
		return nil, err
	}
	return cfg, nil
}

// fenceKey names the fencing counter of a lock key (with its prefix), as
// the library does.
func fenceKey(key string) string { return keys.Fence(keys.DefaultFencePrefix, key) }

// A relative is a key that another primitive keeps under the same name.
type relative struct {
	what string // "semaphore", ...
	key  string
}

// relatives are the keys that a semaphore, a read-write lock and an
// election named key keep, with the prefix.
func relatives(key string) []relative {
	w, r, _ := keys.RW(key)
	return []relative{
		{"semaphore", keys.Semaphore(key)},
		{"read-write lock (writer)", w},
		{"read-write lock (readers)", r},
		{"election (leader record)", keys.Leader(key)},
	}
}

// kindOf says what a key that is not a lock's string is, by its name and,
// if known, its Redis type.
func kindOf(key, typ string) string {
	switch {
	case strings.HasPrefix(key, "redlock:sem:"):
		return "the sorted set of a semaphore's holders (Client.Semaphore, redlock run --permits); give its name to --key instead"
	case strings.HasPrefix(key, "redlock:rw:"):
		return "a key of a read-write lock (Client.RWMutex); give its name to --key instead"
	case strings.HasPrefix(key, "redlock:leader:"):
		return "an election's leader record (Client.Election); give its name to --key instead"
	case strings.HasPrefix(key, keys.DefaultFencePrefix):
		return "a fencing counter; give the lock's key to --key instead"
	case typ != "":
		return "a " + typ + ", not a lock's key (a lock's key is a string)"
	}
	return "not a string, so not a lock's key"
}

// keyStatus is one node's answer about the key.
type keyStatus struct {
	addr   string
	err    error  // no answer, or the key could not be read: its state is unknown
	held   bool   // the key exists
	token  string // its value, if held
	pttl   int64  // PTTL: ms left, -1 no ttl, -2 gone (expired since the GET)
	ttlErr error
	fence  string // the fencing counter, "" if there is none
	fenErr error
	other  string // the key is not a string (WRONGTYPE): what it is
	also   []bool // relatives(key)[i] exists on the node
}

// readStatus reads the key, its ttl and its fencing counter on every node at
// once, each node bounded by --node-timeout. The three reads go in one
// pipeline, not a transaction: the key can expire between them.
func readStatus(cfg *statusConfig) []keyStatus {
	pools := cfg.conn.pools(cfg.nodes, cfg.nodeTimeout)
	out := make([]keyStatus, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		defer p.Close()
		wg.Go(func() { out[i] = readKey(p, cfg) })
	}
	wg.Wait()
	return out
}

func readKey(p *redigo.Pool, cfg *statusConfig) keyStatus {
	s := keyStatus{addr: p.Addr}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.nodeTimeout)
	defer cancel()
	key := cfg.redisKey()
	rel := relatives(key)
	cmds := []driver.Command{
		{Name: "GET", Args: []any{key}, NumKeys: 1},
		{Name: "PTTL", Args: []any{key}, NumKeys: 1},
		{Name: "GET", Args: []any{fenceKey(key)}, NumKeys: 1},
	}
	for _, r := range rel {
		cmds = append(cmds, driver.Command{Name: "EXISTS", Args: []any{r.key}, NumKeys: 1})
	}
	replies := make([]driver.Reply, len(cmds))
	if s.err = p.Exec(ctx, cmds, replies); s.err != nil {
		return s
	}
	s.also = make([]bool, len(rel))
	for i := range rel {
		// Refused (no +exists) or odd: say nothing about that relative.
		v, err := replyValue(replies[3+i])
		n, _ := v.(int64)
		s.also[i] = err == nil && n > 0
	}
	v, err := replyValue(replies[0])
	if err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
		typ := ""
		if t, terr := call(p, cfg.nodeTimeout, "TYPE", key); terr == nil {
			typ = asString(t)
		}
		s.other = kindOf(key, typ)
		return s
	}
	if err != nil {
		s.err = err
		return s
	}
	if v != nil {
		s.held, s.token = true, asString(v)
	}
	if v, err := replyValue(replies[1]); err != nil {
		s.ttlErr = err
	} else if ms, ok := v.(int64); ok {
		s.pttl = ms
	} else {
		s.ttlErr = fmt.Errorf("unexpected reply to PTTL: %v", v)
	}
	if s.held && s.ttlErr == nil && s.pttl == -1 && strings.HasPrefix(key, keys.DefaultFencePrefix) {
		// A fencing counter is a string too, but one without a ttl,
		// which a lock's key always has: not a lock held forever.
		s.held, s.token, s.other = false, "", kindOf(key, "string")
		return s
	}
	if v, err := replyValue(replies[2]); err != nil {
		s.fenErr = err
	} else if v != nil {
		s.fence = asString(v)
	}
	return s
}

func asString(v any) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	}
	return fmt.Sprint(v)
}

type verdictKind int

const (
	verdictFree    verdictKind = iota // no answering node holds the key, and the others cannot make a majority
	verdictHeld                       // one token is on a majority
	verdictSplit                      // tokens on some nodes, none on a majority, even counting the silent nodes
	verdictUnknown                    // too many nodes did not answer to tell
	verdictNotLock                    // a majority answered that the key is not a string: not a lock's key
)

// A verdict is what the nodes' answers add up to.
type verdict struct {
	kind    verdictKind
	token   string // the token with the most nodes, if any
	count   int    // how many nodes hold it
	holders int    // nodes that hold any token
	tokens  int    // distinct tokens seen
	silent  int    // nodes whose state is unknown
	others  int    // nodes where the key is not a string
	other   string // what it is there
	quorum  int
	n       int
}

// judge applies the quorum rule to the nodes' answers. A lock is held only
// if one token is on a majority, N/2+1 nodes: the same rule by which the
// holder acquired it. A node that did not answer may hold anything, so the
// verdict is free or split only if the silent nodes could not complete a
// majority for any token.
func judge(nodes []keyStatus) verdict {
	v := verdict{n: len(nodes), quorum: len(nodes)/2 + 1}
	counts := map[string]int{}
	for _, s := range nodes {
		switch {
		case s.err != nil:
			v.silent++
		case s.other != "":
			v.others++
			v.other = s.other
		case s.held:
			v.holders++
			counts[s.token]++
			if c := counts[s.token]; c > v.count || c == v.count && s.token < v.token {
				v.token, v.count = s.token, c
			}
		}
	}
	v.tokens = len(counts)
	switch {
	case v.count >= v.quorum:
		v.kind = verdictHeld
	case v.others >= v.quorum:
		v.kind = verdictNotLock
	case v.count+v.silent >= v.quorum:
		v.kind = verdictUnknown
	case v.holders == 0:
		v.kind = verdictFree
	default:
		v.kind = verdictSplit
	}
	return v
}

// tokenPrefix shows a quarter of a token, at most 8 bytes: enough to tell
// holders apart, far too little to release someone else's lock, which takes
// the whole token.
func tokenPrefix(token string) string {
	p := token[:min(8, len(token)/4)]
	for _, r := range p {
		if r < 0x21 || r > 0x7e {
			return strconv.QuoteToASCII(p) + "…"
		}
	}
	return p + "…"
}

func printStatus(w io.Writer, cfg *statusConfig, nodes []keyStatus, v verdict) {
	fmt.Fprintf(w, "redlock status: key %q (fencing counter %q) on %d nodes, quorum %d\n", cfg.redisKey(), fenceKey(cfg.redisKey()), v.n, v.quorum)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range nodes {
		if s.err != nil {
			// Untabbed, the cause does not widen the token column.
			fmt.Fprintf(tw, "%s\tunknown\t%s\n", s.addr, nodeCause(s.err, cfg.nodeTimeout))
			continue
		}
		if s.other != "" {
			fmt.Fprintf(tw, "%s\tnot a lock\t%s\n", s.addr, s.other)
			continue
		}
		state, token, ttl := "free", "", ""
		if s.held {
			state, token = "holds", "token "+tokenPrefix(s.token)
			switch {
			case s.ttlErr != nil:
				ttl = "ttl ?: " + nodeCause(s.ttlErr, cfg.nodeTimeout)
			case s.pttl == -1:
				ttl = "no ttl: not a redlock key"
			case s.pttl == -2:
				ttl = "expired just now"
			default:
				ttl = "ttl " + (time.Duration(s.pttl) * time.Millisecond).String()
			}
		}
		fence := "fence none"
		switch {
		case s.fenErr != nil:
			fence = "fence ?: " + nodeCause(s.fenErr, cfg.nodeTimeout)
		case s.fence != "":
			fence = "fence " + s.fence
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.addr, state, token, ttl, fence)
	}
	tw.Flush()
	for _, a := range alsoUnder(cfg, nodes) {
		fmt.Fprintf(w, "also under this name: %s %s on %d of %d nodes\n", a.what, a.key, a.count, len(nodes))
	}
	fmt.Fprintln(w, "verdict: "+v.String())
}

// An alsoFound is a relative of the key found on some nodes.
type alsoFound struct {
	relative
	count int
}

// alsoUnder lists the relatives of the key that exist on any node.
func alsoUnder(cfg *statusConfig, nodes []keyStatus) []alsoFound {
	var out []alsoFound
	for i, r := range relatives(cfg.redisKey()) {
		n := 0
		for _, s := range nodes {
			if i < len(s.also) && s.also[i] {
				n++
			}
		}
		if n > 0 {
			out = append(out, alsoFound{r, n})
		}
	}
	return out
}

func (v verdict) String() string {
	silent := ""
	if v.silent > 0 {
		silent = fmt.Sprintf("; %d node(s) did not answer", v.silent)
	}
	switch v.kind {
	case verdictHeld:
		return fmt.Sprintf("held by a majority: token %s on %d of %d nodes (quorum %d)%s", tokenPrefix(v.token), v.count, v.n, v.quorum, silent)
	case verdictFree:
		if v.silent > 0 {
			return fmt.Sprintf("free: no answering node holds the key, and the %d that did not answer are short of a majority (quorum %d)", v.silent, v.quorum)
		}
		return fmt.Sprintf("free: no node holds the key (%d nodes, quorum %d)", v.n, v.quorum)
	case verdictNotLock:
		return fmt.Sprintf("not a lock: on %d of %d nodes the key is %s", v.others, v.n, v.other)
	case verdictSplit:
		return fmt.Sprintf("split: %d of %d nodes hold a token, %d distinct, at most %d node(s) each; none is on a majority (quorum %d)%s. Likely an acquisition in progress, or keys left by a failed attempt or a crashed holder; they expire within their ttl",
			v.holders, v.n, v.tokens, v.count, v.quorum, silent)
	}
	most := "no answering node holds the key"
	if v.count > 0 {
		most = fmt.Sprintf("%s is on %d node(s)", tokenPrefix(v.token), v.count)
	}
	return fmt.Sprintf("unknown: %s, and with the %d that did not answer it could be on a majority (quorum %d)", most, v.silent, v.quorum)
}

// statusJSON is what --json prints: the table and the verdict as fields.
type statusJSON struct {
	Key         string     `json:"key"`
	FenceKey    string     `json:"fence_key"`
	Nodes       int        `json:"nodes"`
	Quorum      int        `json:"quorum"`
	Verdict     string     `json:"verdict"` // held, free, split, unknown, not_a_lock
	Text        string     `json:"text"`
	TokenPrefix string     `json:"token_prefix,omitempty"`
	OnNodes     int        `json:"on_nodes"` // nodes with the most common token
	Silent      int        `json:"silent"`
	Node        []nodeJSON `json:"node"`
	Also        []alsoJSON `json:"also,omitempty"`
}

type nodeJSON struct {
	Addr        string `json:"addr"`
	State       string `json:"state"` // holds, free, unknown, not_a_lock
	TokenPrefix string `json:"token_prefix,omitempty"`
	PTTLms      *int64 `json:"pttl_ms,omitempty"`
	Fence       string `json:"fence,omitempty"`
	Error       string `json:"error,omitempty"`
}

type alsoJSON struct {
	What  string `json:"what"`
	Key   string `json:"key"`
	Nodes int    `json:"nodes"`
}

var verdictNames = map[verdictKind]string{verdictHeld: "held", verdictFree: "free", verdictSplit: "split", verdictUnknown: "unknown", verdictNotLock: "not_a_lock"}

func printStatusJSON(w io.Writer, cfg *statusConfig, nodes []keyStatus, v verdict) error {
	out := statusJSON{Key: cfg.redisKey(), FenceKey: fenceKey(cfg.redisKey()), Nodes: v.n, Quorum: v.quorum,
		Verdict: verdictNames[v.kind], Text: v.String(), OnNodes: v.count, Silent: v.silent}
	if v.token != "" {
		out.TokenPrefix = tokenPrefix(v.token)
	}
	for _, s := range nodes {
		n := nodeJSON{Addr: s.addr}
		switch {
		case s.err != nil:
			n.State, n.Error = "unknown", nodeCause(s.err, cfg.nodeTimeout)
		case s.other != "":
			n.State, n.Error = "not_a_lock", s.other
		case s.held:
			n.State, n.TokenPrefix = "holds", tokenPrefix(s.token)
			if s.ttlErr == nil {
				n.PTTLms = &s.pttl
			}
		default:
			n.State = "free"
		}
		if s.err == nil && s.fenErr == nil {
			n.Fence = s.fence
		}
		out.Node = append(out.Node, n)
	}
	for _, a := range alsoUnder(cfg, nodes) {
		out.Also = append(out.Also, alsoJSON{a.what, a.key, a.count})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
