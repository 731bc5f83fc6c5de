package redistest

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TestStartClockRate checks that a node started by StartClockRate expires
// keys by a clock running at the rate asked for, measured in real time: a
// PX 400 key must vanish after 400 ms / rate, and the node's TIME must
// advance rate times as fast as the test's clock.
func TestStartClockRate(t *testing.T) {
	for _, rate := range []float64{2, 0.5} {
		t.Run(FaketimeSpec(rate), func(t *testing.T) {
			s := StartClockRate(t, rate)
			c, err := redis.Dial("tcp", s.Addr, redis.DialReadTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			const px = 400 * time.Millisecond
			if _, err := c.Do("SET", "k", "v", "PX", px.Milliseconds()); err != nil {
				t.Fatal(err)
			}
			set := time.Now()
			want := time.Duration(float64(px) / rate)
			var life time.Duration
			for deadline := set.Add(3 * want); ; time.Sleep(time.Millisecond) {
				n, err := redis.Int(c.Do("EXISTS", "k"))
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					life = time.Since(set)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("key still there after %v; at rate %v it should live %v", time.Since(set), rate, want)
				}
			}
			// The key was set a round trip before set; polling adds lateness.
			if life < want-10*time.Millisecond || life > want+100*time.Millisecond {
				t.Errorf("PX %v key lived %v in real time, want %v (rate %v)", px, life, want, rate)
			}

			measured, err := nodeClockRate(c, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if measured < rate*0.97 || measured > rate*1.03 {
				t.Errorf("node's TIME runs at %.4f× real time, want %v", measured, rate)
			}
			t.Logf("PX %v key lived %v (want %v); TIME ran at %.4f×", px, life.Round(time.Millisecond), want, measured)
		})
	}
}

// nodeClockRate reads the node's TIME twice, over at least d of real time,
// and returns how fast the node's clock ran relative to the test's.
func nodeClockRate(c redis.Conn, d time.Duration) (float64, error) {
	read := func() (time.Time, time.Time, error) {
		before := time.Now()
		v, err := redis.Int64s(c.Do("TIME"))
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		// Take the middle of the round trip as the moment of the reading.
		return before.Add(time.Since(before) / 2), time.Unix(v[0], v[1]*1000), nil
	}
	r1, n1, err := read()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	r2, n2, err := read()
	if err != nil {
		return 0, err
	}
	return float64(n2.Sub(n1)) / float64(r2.Sub(r1)), nil
}
