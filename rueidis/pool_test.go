package rueidis_test

import (
	"context"
	"errors"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlocktest"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// requireRedis skips t if redis-server is missing, or fails it when the
// environment asks for real servers, as the kit does.
func requireRedis(t testing.TB, cluster bool) {
	t.Helper()
	ok, why := redistest.Available()
	if ok && cluster {
		ok, why = redistest.ClusterAvailable()
	}
	if ok {
		return
	}
	if os.Getenv("REDLOCK_REQUIRE_DOCKER") == "1" || os.Getenv("REDLOCK_REQUIRE_REDIS") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func exec(t *testing.T, p redlock.Pool, cmds ...driver.Command) []driver.Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	replies := make([]driver.Reply, len(cmds))
	if err := p.Exec(ctx, cmds, replies); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	return replies
}

func cmd(name string, args ...any) driver.Command {
	return driver.Command{Name: name, Args: args}
}

// Each kind of reply arrives as redlock.Pool.Exec promises, over RESP3 and
// RESP2, alone (Client.Do) and in a batch (Client.DoMulti).
func TestReplyMapping(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t)
	cases := []struct {
		name string
		cmd  driver.Command
		want driver.Reply
	}{
		{"status", cmd("SET", "k", "v"), driver.Reply{Value: "OK"}},
		{"bulk", cmd("GET", "k"), driver.Reply{Value: "v"}},
		{"null bulk", cmd("GET", "missing"), driver.Reply{}},
		{"integer", cmd("INCR", "n"), driver.Reply{Value: int64(1)}},
		{"negative integer", cmd("PTTL", "missing"), driver.Reply{Value: int64(-2)}},
		{"array", cmd("EVAL", "return {1, 'a', false, {2, 'b'}}", int64(0)),
			driver.Reply{Value: []any{int64(1), "a", nil, []any{int64(2), "b"}}}},
		{"empty array", cmd("EVAL", "return {}", int64(0)), driver.Reply{Value: []any{}}},
		{"error in an array", cmd("EVAL", "return {1, redis.error_reply('BAD inside')}", int64(0)),
			driver.Reply{Value: []any{int64(1), driver.ReplyError("BAD inside")}}},
		{"error reply", cmd("EVAL", "return redis.error_reply('NOPE custom text')", int64(0)),
			driver.Reply{Err: driver.ReplyError("NOPE custom text")}},
		// rueidis strips "ERR " from RedisError's text; the port keeps it.
		{"ERR keeps its code", cmd("NOSUCHCOMMAND"),
			driver.Reply{Err: driver.ReplyError("ERR unknown command 'NOSUCHCOMMAND', with args beginning with: ")}},
		{"script error", cmd("EVALSHA", strings.Repeat("0", 40), int64(0)),
			driver.Reply{Err: driver.ReplyError("NOSCRIPT No matching script. Please use EVAL.")}},
		{"wrong type", cmd("EVAL", "redis.call('RPUSH', KEYS[1], 'x') return redis.call('GET', KEYS[1])", int64(1), "list"),
			driver.Reply{Err: driver.ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value script: ")}},
	}
	for _, resp2 := range []bool{false, true} {
		client, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true, AlwaysRESP2: resp2,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		p := redlockrueidis.NewPool(client)
		if !p.SingleServer() {
			t.Error("a standalone client's Pool does not report SingleServer")
		}
		proto := map[bool]string{false: "RESP3", true: "RESP2"}[resp2]
		exec(t, p, cmd("FLUSHALL"))

		var batch []driver.Command
		for _, c := range cases {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				got := exec(t, p, c.cmd)[0]
				checkReply(t, got, c.want)
			})
			batch = append(batch, c.cmd)
		}
		// The same again, as one batch.
		exec(t, p, cmd("FLUSHALL"))
		got := exec(t, p, batch...)
		for i, c := range cases {
			t.Run(proto+"/batch/"+c.name, func(t *testing.T) { checkReply(t, got[i], c.want) })
		}
	}
}

func checkReply(t *testing.T, got, want driver.Reply) {
	t.Helper()
	if wantErr, ok := want.Err.(driver.ReplyError); ok {
		// The script errors' tails vary with the Redis version.
		gotErr, ok := got.Err.(driver.ReplyError)
		if !ok || !strings.HasPrefix(string(gotErr), string(wantErr)) || got.Value != nil {
			t.Errorf("got %#v, want an error reply starting %q", got, wantErr)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

// A RESP3 type that no command of redlock's gets still comes through.
func TestReplyMappingRESP3Double(t *testing.T) {
	requireRedis(t, false)
	_, client := startClient(t)
	got := exec(t, redlockrueidis.NewPool(client), cmd("EVAL", "redis.setresp(3) return {double=1.5}", int64(0)))[0]
	if got != (driver.Reply{Value: 1.5}) {
		t.Errorf("got %#v, want 1.5", got)
	}
}

// Arguments of each allowed type go out as Redis expects them, keys in
// their place; any other type fails the batch before anything is sent.
func TestArguments(t *testing.T) {
	requireRedis(t, false)
	_, client := startClient(t)
	p := redlockrueidis.NewPool(client)

	set := driver.Command{Name: "SET", Args: []any{[]byte("key"), "v", "PX", int64(60000)}, NumKeys: 1}
	incr := driver.Command{Name: "INCRBY", Args: []any{"n", 7}, NumKeys: 1}
	// Keys in the middle: EVAL script numkeys key1 key2 arg.
	eval := driver.Command{
		Name:     "EVAL",
		Args:     []any{"return {KEYS[1], KEYS[2], ARGV[1]}", int64(2), "k1", []byte("k2"), int64(-5)},
		FirstKey: 2, NumKeys: 2,
	}
	got := exec(t, p, set, incr, eval, cmd("PTTL", "key"))
	if got[0].Value != "OK" || got[1].Value != int64(7) {
		t.Errorf("SET, INCRBY: %#v, %#v", got[0], got[1])
	}
	if want := []any{"k1", "k2", "-5"}; !reflect.DeepEqual(got[2].Value, want) {
		t.Errorf("EVAL: %#v, want %#v", got[2], want)
	}
	if pttl, _ := got[3].Value.(int64); pttl <= 0 || pttl > 60000 {
		t.Errorf("PTTL after SET PX 60000: %#v", got[3])
	}

	// Integers repeat (a lock's ttl in every SET) and alternate with
	// others: each goes out as its own text.
	ints := []any{int64(60000), int64(1), int64(60000), int64(45000), int64(-5), int64(99), int64(100), int64(45000), int64(60000)}
	echo := driver.Command{Name: "EVAL", Args: append([]any{"return ARGV", int64(0)}, ints...)}
	want := []any{"60000", "1", "60000", "45000", "-5", "99", "100", "45000", "60000"}
	for range 2 { // the second time, from what the first left behind
		if got := exec(t, p, echo)[0].Value; !reflect.DeepEqual(got, want) {
			t.Errorf("integer arguments: %#v, want %#v", got, want)
		}
	}

	replies := make([]driver.Reply, 2)
	err := p.Exec(context.Background(), []driver.Command{cmd("SET", "bad", 1.5), cmd("SET", "good", "x")}, replies)
	if err == nil || !strings.Contains(err.Error(), "float64") {
		t.Errorf("Exec with a float64 argument: %v, want an error naming the type", err)
	}
	if v := exec(t, p, cmd("EXISTS", "good"))[0].Value; v != int64(0) {
		t.Errorf("a batch with a bad argument sent some of its commands: EXISTS good = %v", v)
	}
}

// startClient starts a server and returns it with a client of it in
// standalone mode (no client-side cache), closed when t ends.
func startClient(t *testing.T) (*redistest.Server, rueidis.Client) {
	t.Helper()
	s := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return s, client
}

// keyed is a command whose first argument is its one key.
func keyed(name string, args ...any) driver.Command {
	return driver.Command{Name: name, Args: args, NumKeys: 1}
}

// slotClient records the slots of the commands of each DoMulti.
type slotClient struct {
	rueidis.Client
	slots [][]uint16
}

func (c *slotClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	var s []uint16
	for i := range cmds {
		s = append(s, cmds[i].Slot())
	}
	c.slots = append(c.slots, s)
	return c.Client.DoMulti(ctx, cmds...)
}

// A client of one master sends a batch on the connection that its first
// command's slot picks: that command has its key's slot, and the others,
// whose slots go unread, none (no crc16 for them).
func TestBatchSlots(t *testing.T) {
	requireRedis(t, false)
	_, client := startClient(t)
	rec := &slotClient{Client: client}
	p := redlockrueidis.NewPool(rec)
	none := client.B().Ping().Build()
	noSlot := none.Slot()
	got := exec(t, p, keyed("SET", "a", "1"), keyed("SET", "b", "2"), keyed("GET", "a"))
	if got[0].Value != "OK" || got[1].Value != "OK" || got[2].Value != "1" {
		t.Fatalf("SET a, SET b, GET a: %#v", got)
	}
	if len(rec.slots) != 1 || len(rec.slots[0]) != 3 {
		t.Fatalf("DoMulti calls: %v, want one of three commands", rec.slots)
	}
	if sl := rec.slots[0]; sl[0] == noSlot || sl[1] != noSlot || sl[2] != noSlot {
		t.Errorf("slots %v: want the first command's key slot, then none (%d)", sl, noSlot)
	}
}

// faultClient answers through a real client, then replaces the results of
// the commands from index fail on with err, as a connection that breaks
// mid-batch does.
type faultClient struct {
	rueidis.Client
	fail int
	err  error
}

func (c *faultClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	res := c.Client.Do(ctx, cmd)
	if c.fail == 0 {
		return rueidis.NewErrorResult(c.err)
	}
	return res
}

func (c *faultClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	res := c.Client.DoMulti(ctx, cmds...)
	for i := c.fail; i < len(res); i++ {
		res[i] = rueidis.NewErrorResult(c.err)
	}
	return res
}

// A connection error on any command fails the whole batch, as the port
// says; error replies do not.
func TestBatchErrors(t *testing.T) {
	requireRedis(t, false)
	_, client := startClient(t)

	batch := []driver.Command{cmd("SET", "a", "1"), cmd("NOSUCHCOMMAND"), cmd("SET", "b", "2")}
	for _, fail := range []int{0, 1, 2} {
		p := redlockrueidis.NewPool(&faultClient{Client: client, fail: fail, err: io.ErrUnexpectedEOF})
		replies := make([]driver.Reply, len(batch))
		if err := p.Exec(context.Background(), batch, replies); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("batch broken from command %d: %v, want the connection's error", fail, err)
		}
		if err := p.Exec(context.Background(), batch[:1], replies[:1]); fail == 0 && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("one command, broken: %v, want the connection's error", err)
		}
	}
	p := redlockrueidis.NewPool(&faultClient{Client: client, fail: len(batch)})
	replies := make([]driver.Reply, len(batch))
	if err := p.Exec(context.Background(), batch, replies); err != nil {
		t.Fatalf("a batch with an error reply: %v, want its replies", err)
	}
	if replies[0].Value != "OK" || replies[2].Value != "OK" || replies[1].Err == nil {
		t.Errorf("replies %#v, want OK, an error reply, OK", replies)
	}
}

// An error reply to the handshake of a new connection fails the batch as a
// ReplyError with the server's code, on every Exec until it is fixed.
func TestHandshakeErrors(t *testing.T) {
	requireRedis(t, false)
	s := redistest.StartWith(t, []redis.DialOption{redis.DialPassword("secret")}, "--requirepass", "secret")
	for _, c := range []struct{ password, code string }{{"", "NOAUTH"}, {"wrong", "WRONGPASS"}} {
		client, _ := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true, Password: c.password,
		})
		if client == nil {
			t.Fatal("no client")
		}
		defer client.Close()
		p := redlockrueidis.NewPool(client)
		for range 2 {
			err := p.Exec(context.Background(), []driver.Command{cmd("SET", "k", "v")}, make([]driver.Reply, 1))
			var rerr driver.ReplyError
			if !errors.As(err, &rerr) || rerr.Code() != c.code {
				t.Errorf("password %q: Exec: %v, want a %s ReplyError", c.password, err, c.code)
			}
		}
	}
}

// Exec returns by its context's deadline from a server that never answers,
// alone and in a batch.
func TestExecHonoursDeadline(t *testing.T) {
	requireRedis(t, false)
	s, client := startClient(t)
	p := redlockrueidis.NewPool(client)
	exec(t, p, cmd("PING")) // connect while the server answers
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	for _, n := range []int{1, 3} {
		const timeout = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmds := make([]driver.Command, n)
		for i := range cmds {
			cmds[i] = cmd("SET", "frozen", "x")
		}
		start := time.Now()
		err := p.Exec(ctx, cmds, make([]driver.Reply, n))
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%d commands to a paused server: %v, want context.DeadlineExceeded", n, err)
		}
		if took > timeout+200*time.Millisecond {
			t.Errorf("%d commands to a paused server took %v with a %v deadline", n, took, timeout)
		}
	}
}

// On a cluster client: Name lists every node the client knows, and a
// command whose keys hash to different slots gets the server's CROSSSLOT
// rather than a panic from rueidis's command builder.
func TestClusterClient(t *testing.T) {
	requireRedis(t, true)
	rc := redistest.StartRedisCluster(t, 3)
	var seeds []redlocktest.Server
	for _, addr := range rc.Addrs() {
		seeds = append(seeds, redlocktest.Server{Addr: addr})
	}
	p := dialCluster(t, seeds)
	if p.(driver.SingleServer).SingleServer() {
		t.Error("a cluster client's Pool reports SingleServer: the core would combine keys of different slots")
	}
	want := slices.Clone(rc.Addrs())
	slices.Sort(want)
	if got := p.(driver.Namer).Name(); got != strings.Join(want, ",") {
		t.Errorf("Name() = %q, want %q", got, strings.Join(want, ","))
	}

	// A batch over several slots: each command goes to its own slot's
	// master, so each keeps its slot (rueidis would follow the MOVED of a
	// command without one, at the cost of a round trip).
	cc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: rc.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rec := &slotClient{Client: cc}
	none := cc.B().Ping().Build()
	batch := exec(t, redlockrueidis.NewPool(rec), keyed("SET", "a", "1"), keyed("SET", "b", "2"), keyed("SET", "c", "3"), keyed("GET", "b"))
	if batch[0].Value != "OK" || batch[1].Value != "OK" || batch[2].Value != "OK" || batch[3].Value != "2" {
		t.Errorf("a batch over three slots on a cluster: %#v", batch)
	}
	if len(rec.slots) != 1 || slices.Contains(rec.slots[0], none.Slot()) {
		t.Errorf("a cluster batch's slots: %v, want each command's key slot", rec.slots)
	}

	c, err := redlock.New([]redlock.Pool{p}, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	// "a}b" has no hash tag, so its fencing counter cannot share its slot
	// (docs/drivers.md).
	_, err = c.TryLock(context.Background(), "a}b", time.Second)
	var rerr driver.ReplyError
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &rerr) || rerr.Code() != "CROSSSLOT" {
		t.Errorf("fenced TryLock of a}b on a cluster: %v, want ErrNotObtained with CROSSSLOT", err)
	}

	// SUBSCRIBE goes to any node, and the cluster forwards each PUBLISH to
	// every node.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newSubscription("kit:cluster:ch")
	done := make(chan error, 1)
	go func() { done <- p.(driver.Subscriber).Subscribe(ctx, &sub.Subscription) }()
	select {
	case <-sub.ready:
	case err := <-done:
		t.Fatalf("Subscribe on a cluster client: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe on a cluster client not ready after 5s")
	}
	for _, addr := range rc.Addrs() { // from each node in turn
		exec(t, dial(t, redlocktest.Server{Addr: addr}), cmd("PUBLISH", "kit:cluster:ch", addr))
		select {
		case m := <-sub.got:
			if m != [2]string{"kit:cluster:ch", addr} {
				t.Errorf("got %q, want %q on kit:cluster:ch", m, addr)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message published on %s not delivered after 5s", addr)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe after cancel: %v", err)
	}
}

// A Pool without a client is refused by redlock.New, and fails rather than
// panics if used anyway.
func TestNilClient(t *testing.T) {
	p := redlockrueidis.NewPool(nil)
	if _, err := redlock.New([]redlock.Pool{p}); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("redlock.New with a nil client = %v, want ErrInvalid", err)
	}
	if err := p.Exec(context.Background(), []driver.Command{{Name: "PING"}}, make([]driver.Reply, 1)); err == nil {
		t.Error("Exec without a client succeeded")
	}
	if err := p.Subscribe(context.Background(), &newSubscription("c").Subscription); err == nil {
		t.Error("Subscribe without a client succeeded")
	}
	if p.SingleServer() {
		t.Error("a Pool without a client reports SingleServer")
	}
}
