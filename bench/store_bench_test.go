package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// benchIdentities is how many identities the benchmarks spread calls over.
const benchIdentities = 10_000

// generous admits every call of a benchmark: the admit path, with its
// write, is the one measured.
func generous(alg tollgate.Algorithm) tollgate.Limit {
	return tollgate.Limit{Algorithm: alg, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}
}

// runPrefix is unique to one benchmark run, so runs never share state.
func runPrefix(name string) string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return "bench:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// identities returns n identity names.
func identities(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	return ids
}

type benchSubject struct {
	name      string
	requestID bool
	make      func(b *testing.B) Decider
}

// benchSubjects lists tollgate's stores (each algorithm, with and without
// request ids) and redis_rate, each on its own client to the test Redis.
func benchSubjects() []benchSubject {
	var subjects []benchSubject
	subjects = append(subjects, benchSubject{name: "memory", make: func(b *testing.B) Decider {
		return Tollgate{Store: newMemory(b), Limit: generous(tollgate.TokenBucket)}
	}})
	for _, alg := range []tollgate.Algorithm{tollgate.TokenBucket, tollgate.GCRA, tollgate.SlidingWindow, tollgate.FixedWindow} {
		for _, withID := range []bool{false, true} {
			name := "redis-" + alg.String()
			if withID {
				name += "+request-id"
			}
			subjects = append(subjects, benchSubject{name: name, requestID: withID, make: func(b *testing.B) Decider {
				st := newRedis(b, newClient(b), store.WithPrefix(runPrefix(b.Name())))
				return Tollgate{Store: st, Limit: generous(alg)}
			}})
		}
	}
	subjects = append(subjects, benchSubject{name: "redis_rate", make: func(b *testing.B) Decider {
		return RedisRate{Limiter: redis_rate.NewLimiter(newClient(b)), Limit: RedisRateLimit(generous(tollgate.GCRA))}
	}})
	return subjects
}

// BenchmarkDecide measures one decision at a time from one goroutine: the
// allocations and the round trip of each subject.
func BenchmarkDecide(b *testing.B) {
	ids := identities(benchIdentities)
	for _, s := range benchSubjects() {
		b.Run(s.name, func(b *testing.B) {
			d := s.make(b)
			ctx := context.Background()
			prefix := runPrefix("id")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				var reqID string
				if s.requestID {
					reqID = prefix + strconv.Itoa(i)
				}
				if _, err := d.Decide(ctx, ids[i%len(ids)], reqID); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkDecideParallel measures decisions from 64 goroutines at once on
// random identities, as many concurrent RPCs would make them.
func BenchmarkDecideParallel(b *testing.B) {
	ids := identities(benchIdentities)
	for _, s := range benchSubjects() {
		b.Run(s.name, func(b *testing.B) {
			d := s.make(b)
			ctx := context.Background()
			prefix := runPrefix("id")
			var seq atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var reqID string
					if s.requestID {
						reqID = prefix + strconv.FormatInt(seq.Add(1), 10)
					}
					if _, err := d.Decide(ctx, ids[rand.IntN(len(ids))], reqID); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
