package overload_test

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/overload"
)

// A call's criticality travels in its context: the client interceptors
// send it in Header, and a door puts the incoming call's there for the
// calls its handler makes.
func ExampleWithCriticality() {
	ctx := overload.WithCriticality(context.Background(), overload.SheddablePlus)
	c, ok := overload.CriticalityFrom(ctx)
	fmt.Println(c, ok)
	c, err := overload.ParseCriticality("critical-plus")
	fmt.Println(c, err)
	// Output:
	// SHEDDABLE_PLUS true
	// CRITICAL_PLUS <nil>
}

// A client whose calls are refused refuses a share of them itself, so the
// server does not pay for them.
func ExampleThrottle() {
	t, err := overload.NewThrottle(overload.ThrottleOptions{})
	if err != nil {
		panic(err)
	}
	sent := 0
	for range 100 {
		if t.Allow(overload.Sheddable) == nil {
			sent++
			t.Record(overload.Sheddable, false) // the server refused it
		}
	}
	fmt.Println(sent < 20)
	// Output: true
}
