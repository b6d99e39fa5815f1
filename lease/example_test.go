package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lease"
	"github.com/tollgate/tollgate/store"
)

// callCounter counts the decisions that reach the shared store.
type callCounter struct {
	tollgate.Store
	calls int
}

func (c *callCounter) Allow(ctx context.Context, req tollgate.Request) (tollgate.Decision, error) {
	c.calls++
	return c.Store.Allow(ctx, req)
}

// A tier in front of the shared store (here a Memory store standing for
// Redis): a tenant decided more than 100 times a second admits from leases,
// a few hundred decisions per shared-store call once its leases have grown.
func ExampleNew() {
	mem, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	shared := &callCounter{Store: mem}
	tier, err := lease.New(shared,
		lease.WithHotThreshold(100, time.Second), // the defaults, spelled out
		lease.WithLifetime(time.Second),
		lease.WithMaxShare(0.01),
	)
	if err != nil {
		log.Fatal(err)
	}
	req := tollgate.Request{Key: "tenant-a", Limit: tollgate.PerSecond(1_000_000)}
	admitted := 0
	for range 20_000 {
		d, err := tier.Allow(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("shared-store decisions below 200:", shared.calls < 200)
	// Output:
	// admitted: 20000
	// shared-store decisions below 200: true
}
