package heavy_test

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/heavy"
)

// Two replicas count the refusals of one rule; their snapshots merge into
// the heaviest refused identities of both. Replica a never saw tenant-b,
// but cannot prove it: its Floor goes into tenant-b's Max.
func Example() {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	a, _ := heavy.New(heavy.Options{})
	b, _ := heavy.New(heavy.Options{})
	for range 30 {
		a.Observe(now, "tenant-a")
	}
	for range 20 {
		b.Observe(now, "tenant-a")
	}
	for range 25 {
		b.Observe(now, "tenant-b")
	}
	a.Observe(now, "tenant-c")

	merged, err := heavy.Merge(2, a.Snapshot(now, 10), b.Snapshot(now, 10))
	if err != nil {
		panic(err)
	}
	for _, e := range merged.Top {
		fmt.Printf("%s: %d refusals (from %d to %d)\n", e.ID, e.Count, e.Min, e.Max)
	}
	fmt.Printf("%d refusals in all; no other identity more than %d\n", merged.Total, merged.Floor)
	// Output:
	// tenant-a: 50 refusals (from 50 to 50)
	// tenant-b: 25 refusals (from 25 to 26)
	// 76 refusals in all; no other identity more than 2
}

// With a HashKey, a sketch shows identities as an opaque id; OpaqueID
// tells an operator which id a suspect would have.
func ExampleOpaqueID() {
	key := []byte("a key of at least 16 bytes")
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	s, _ := heavy.New(heavy.Options{HashKey: key})
	s.Observe(now, "api-key-4f9a")
	top := s.Snapshot(now, 1).Top[0]
	fmt.Println(top.ID == heavy.OpaqueID(key, "api-key-4f9a"), len(top.ID))
	// Output: true 32
}
