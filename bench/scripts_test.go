package bench

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// BenchmarkReleaseScripts: the server's side of combined releases
// (pipe.go). One node; each iteration pipelines 16 SET NX PX and then
// either 16 calls of release.lua or one call of release_many.lua for the
// 16 keys, and reports the server's CPU time (INFO cpu) per SET and
// release. ns/op is the client's wall time per 16 locks, not the point.
func BenchmarkReleaseScripts(b *testing.B) {
	one, err := os.ReadFile("../scripts/release.lua")
	if err != nil {
		b.Fatal(err)
	}
	many, err := os.ReadFile("../scripts/release_many.lua")
	if err != nil {
		b.Fatal(err)
	}
	pools := newPools(b, startNodes(b, 1))
	conn := pools[0].Get()
	defer conn.Close()
	oneSHA, err := redis.String(conn.Do("SCRIPT", "LOAD", one))
	if err != nil {
		b.Fatal(err)
	}
	manySHA, err := redis.String(conn.Do("SCRIPT", "LOAD", many))
	if err != nil {
		b.Fatal(err)
	}
	const batch, token, channel = 16, "0123456789abcdefghijkl", "redlock:released:" // the channels' prefix
	for _, combined := range []bool{false, true} {
		b.Run("combined="+strconv.FormatBool(combined), func(b *testing.B) {
			prefix := "bench:" + b.Name() + ":" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":"
			keys := make([]any, batch)
			before := serverCPU(b, conn)
			b.ResetTimer()
			for i := range b.N {
				for j := range keys {
					keys[j] = prefix + strconv.Itoa(i) + ":" + strconv.Itoa(j)
					conn.Send("SET", keys[j], token, "NX", "PX", int64(10000))
				}
				if combined {
					args := append([]any{manySHA, batch}, keys...)
					for range batch {
						args = append(args, token)
					}
					conn.Send("EVALSHA", append(args, channel)...)
				} else {
					for _, k := range keys {
						conn.Send("EVALSHA", oneSHA, 1, k, token, channel)
					}
				}
				if err := conn.Flush(); err != nil {
					b.Fatal(err)
				}
				replies := 2 * batch
				if combined {
					replies = batch + 1
				}
				for range replies {
					if _, err := conn.Receive(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric((serverCPU(b, conn)-before)/float64(b.N*batch)*1e6, "server-µs/lock")
		})
	}
}

// serverCPU returns the node's used_cpu_sys plus used_cpu_user, in seconds.
func serverCPU(b *testing.B, conn redis.Conn) float64 {
	info, err := redis.String(conn.Do("INFO", "cpu"))
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return total
}
