package lease

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// BenchmarkHotIdentity decides one hot identity from parallel goroutines,
// on the Memory store alone and behind the tier: the cost of a decision
// admitted from a lease (an atomic add on a shared counter, a map lookup
// under a read lock, a clock reading).
func BenchmarkHotIdentity(b *testing.B) {
	limit := tollgate.Limit{Algorithm: tollgate.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 100_000_000}
	for _, bc := range []struct {
		name string
		tier bool
	}{{"memory", false}, {"memory+lease", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var st tollgate.Store = newMemory(b)
			if bc.tier {
				st = mustNew(b, st)
			}
			req := tollgate.Request{Key: "tenant", Limit: limit}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := st.Allow(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
