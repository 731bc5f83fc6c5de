package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/fence"
	"github.com/quorumlock/redlock/redigo"
)

// Every exported method of every exported type, called on a nil and on a
// zero value, found by reflection so that a method added later is covered
// too: none panics, and each error it returns wraps ErrInvalid. What a call
// returns that is itself one of these types (c.RWMutex on a nil Client, say)
// is called through in the same way. TestNilAndZeroReceivers names the
// calls one by one; this one cannot miss one.
func TestNilAndZeroReceiversByReflection(t *testing.T) {
	roots := []any{
		(*redlock.Client)(nil), new(redlock.Client),
		(*redlock.Lock)(nil), new(redlock.Lock),
		(*redlock.Semaphore)(nil), new(redlock.Semaphore),
		(*redlock.RWMutex)(nil), new(redlock.RWMutex),
		(*redlock.Election)(nil), new(redlock.Election),
		(*redlock.Leadership)(nil), new(redlock.Leadership),
		(*redlock.NodeError)(nil), new(redlock.NodeError),
		redlock.Health{}, redlock.Leader{},
		(*fence.Guard)(nil), new(fence.Guard),
		(*redigo.Pool)(nil), new(redigo.Pool),
	}
	errType := reflect.TypeFor[error]()
	ctxType := reflect.TypeFor[context.Context]()
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	arg := func(typ reflect.Type) reflect.Value {
		switch {
		case typ == ctxType:
			return reflect.ValueOf(context.Background())
		case typ == reflect.TypeFor[time.Duration]():
			return reflect.ValueOf(time.Second)
		case typ == reflect.TypeFor[func(context.Context) error]():
			return reflect.ValueOf(fn)
		case typ == reflect.TypeFor[func() error]():
			return reflect.ValueOf(func() error { ran = true; return nil })
		case typ.Kind() == reflect.String:
			return reflect.ValueOf("k").Convert(typ)
		case typ.Kind() == reflect.Int || typ.Kind() == reflect.Uint64:
			return reflect.ValueOf(1).Convert(typ)
		}
		return reflect.Zero(typ)
	}
	ours := func(typ reflect.Type) bool {
		for _, r := range roots {
			if reflect.TypeOf(r) == typ {
				return true
			}
		}
		return false
	}
	// A zero Guard is ready for use (its doc says so), and a NodeError's
	// methods report what it holds.
	usable := func(name string) bool {
		return strings.HasPrefix(name, "zero *fence.Guard") || strings.Contains(name, "NodeError")
	}
	// redigo.Pool embeds a *redis.Pool: the methods it promotes are
	// redigo's, and redlock.New refuses a Pool without one (Valid).
	promoted := reflect.TypeFor[*redis.Pool]()
	calls := 0
	var call func(name string, v reflect.Value, depth int)
	call = func(name string, v reflect.Value, depth int) {
		for i := range v.NumMethod() {
			m := v.Type().Method(i)
			what := fmt.Sprintf("%s.%s", name, m.Name)
			if _, ok := promoted.MethodByName(m.Name); ok && strings.Contains(name, "redigo") {
				continue
			}
			mt := v.Method(i).Type()
			in := make([]reflect.Value, mt.NumIn())
			for j := range in {
				if mt.IsVariadic() && j == mt.NumIn()-1 {
					in = in[:j]
					break
				}
				in[j] = arg(mt.In(j))
			}
			var out []reflect.Value
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s panics: %v", what, p)
					}
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if len(in) > 0 && mt.In(0) == ctxType {
					in[0] = reflect.ValueOf(ctx)
				}
				calls++
				out = v.Method(i).Call(in)
			}()
			for _, o := range out {
				if o.Type() == errType && !o.IsNil() {
					err := o.Interface().(error)
					if !errors.Is(err, redlock.ErrInvalid) && !usable(name) && !strings.Contains(name, "redigo") {
						t.Errorf("%s = %v, want an error wrapping ErrInvalid", what, err)
					}
				}
				if depth < 2 && ours(o.Type()) {
					call(what+"()", o, depth+1)
				}
				if o.Kind() == reflect.Chan && o.Type().ChanDir()&reflect.RecvDir != 0 && !o.IsNil() {
					// A channel a nil value returns is closed or never sends;
					// either way reading it with a timeout must not panic.
					select {
					case <-time.After(time.Millisecond):
					default:
					}
				}
			}
			if ran && !usable(name) {
				t.Errorf("%s ran the caller's function on an unusable receiver", what)
			}
			ran = false
		}
	}
	for _, r := range roots {
		v := reflect.ValueOf(r)
		name := v.Type().String()
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			name = "zero " + name
		}
		call(name, v, 0)
	}
	t.Logf("%d calls", calls)

	// The package's functions that take a ctx, given a nil one.
	var nilCtx context.Context
	for name, f := range map[string]func(){
		"HeldLock":  func() { _ = redlock.HeldLock(nilCtx) },
		"fence.Set": func() { _ = fence.Set(nilCtx, nil, "k", 1, "v") },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s(nil ctx) panics: %v", name, p)
				}
			}()
			f()
		}()
	}

	// A redigo.Pool without its *redis.Pool is refused at construction.
	if _, err := redlock.New([]redlock.Pool{&redigo.Pool{Addr: "127.0.0.1:1"}}); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("New with a redigo.Pool that has no *redis.Pool = %v, want ErrInvalid", err)
	}
}

// Every exported method that takes a ctx, on live values, given a nil ctx:
// no panic, and an error wrapping ErrInvalid, with nothing held after.
func TestNilContextByReflection(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "nilctx:l", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.Semaphore("nilctx:s", 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e := client.Election("nilctx:e")
	ld, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ld.Resign(ctx) }()
	ctxType := reflect.TypeFor[context.Context]()
	errType := reflect.TypeFor[error]()
	for _, r := range []any{client, l, p, s, client.RWMutex("nilctx:rw"), e, ld} {
		v := reflect.ValueOf(r)
		for i := range v.NumMethod() {
			m := v.Method(i)
			mt := m.Type()
			if mt.NumIn() == 0 || mt.In(0) != ctxType {
				continue
			}
			what := v.Type().String() + "." + v.Type().Method(i).Name
			in := []reflect.Value{reflect.Zero(ctxType)}
			for j := 1; j < mt.NumIn(); j++ {
				switch typ := mt.In(j); {
				case mt.IsVariadic() && j == mt.NumIn()-1:
				case typ == reflect.TypeFor[time.Duration]():
					in = append(in, reflect.ValueOf(time.Minute))
				case typ == reflect.TypeFor[func(context.Context) error]():
					in = append(in, reflect.ValueOf(func(context.Context) error { t.Errorf("%s ran fn", what); return nil }))
				case typ.Kind() == reflect.String:
					in = append(in, reflect.ValueOf("nilctx:x"))
				default:
					in = append(in, reflect.Zero(typ))
				}
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s(nil ctx) panics: %v", what, p)
					}
				}()
				for _, o := range m.Call(in) {
					if o.Type() == errType && !errors.Is(o.Interface().(error), redlock.ErrInvalid) {
						t.Errorf("%s(nil ctx) = %v, want ErrInvalid", what, o.Interface())
					}
				}
			}()
		}
	}
}
