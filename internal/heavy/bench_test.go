package heavy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchStreams are the refusals the benchmarks count: one identity again
// and again (one attacker: every refusal to one shard), a Zipf law over
// 100,000 identities, and 100,000 identities in turn (a flood of equals,
// which churns the tracked set the most).
var benchStreams = sync.OnceValue(func() []struct {
	name string
	ids  []string
} {
	r := rand.New(rand.NewPCG(9, 9))
	zc := zipfCounts(1.0, 1_000_000)
	zipf := shuffled(r, expand(zc, all(zc)))
	stream := func(ids []int32) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = names[id]
		}
		return out
	}
	return []struct {
		name string
		ids  []string
	}{
		{"one identity", names[:1]},
		{"zipf", stream(zipf)},
		{"flood", names},
	}
})

// BenchmarkObserve is the cost of counting one refusal, on one goroutine,
// with identities shown as they are and hashed. The time is read once, as
// a limiter passes the time it read for the call.
func BenchmarkObserve(b *testing.B) {
	for _, st := range benchStreams() {
		for _, hashed := range []bool{false, true} {
			name := st.name + "/plain"
			var key []byte
			if hashed {
				name, key = st.name+"/hashed", make([]byte, 32)
			}
			b.Run(name, func(b *testing.B) {
				s, now := warm(b, key, st.ids), time.Now()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					s.Observe(now, st.ids[i])
					if i++; i == len(st.ids) {
						i = 0
					}
				}
			})
		}
	}
}

// BenchmarkObserveParallel is BenchmarkObserve from 16 goroutines a CPU
// at once: refusals under attack, contending for the shards' locks (for
// one identity, all for one lock).
func BenchmarkObserveParallel(b *testing.B) {
	for _, st := range benchStreams() {
		b.Run(st.name, func(b *testing.B) {
			s, now := warm(b, nil, st.ids), time.Now()
			var next atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919)) % len(st.ids)
				for pb.Next() {
					s.Observe(now, st.ids[i])
					if i++; i == len(st.ids) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkSnapshot is the cost of a snapshot of a full sketch, which
// takes each shard's lock in turn.
func BenchmarkSnapshot(b *testing.B) {
	s, now := warm(b, nil, benchStreams()[1].ids), time.Now()
	b.ReportAllocs()
	for b.Loop() {
		s.Snapshot(now, 100)
	}
}

// warm is a sketch that has counted ids once, now, so that its memory is
// taken.
func warm(b *testing.B, key []byte, ids []string) *Sketch {
	s, err := New(Options{HashKey: key})
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range ids {
		s.Observe(time.Now(), id)
	}
	return s
}
