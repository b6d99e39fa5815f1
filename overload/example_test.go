package overload_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tollgate/tollgate/overload"
)

// A door asks Check before it spends anything on a call, then Acquire,
// and gives the seat back when the handler returns.
func ExampleLimiter() {
	l, err := overload.New(overload.Options{})
	if err != nil {
		panic(err)
	}
	call := overload.Call{Criticality: overload.Critical, Tenant: "acme"}
	if err := l.Check(call); err != nil {
		return // answer 503 / Unavailable with the Refusal's RetryAfter
	}
	seat, err := l.Acquire(context.Background(), call)
	var r *overload.Refusal
	if errors.As(err, &r) {
		fmt.Println("shed; retry after", r.RetryAfter)
		return
	}
	defer seat.Done()
	fmt.Println("in flight:", l.Stats().InFlight)
	// Output: in flight: 1
}

// A call's criticality comes from its headers: the name in Header, or
// failsafe-go's priority; a call with neither is Critical.
func ExampleFromHeaders() {
	h := http.Header{}
	h.Set(overload.Header, "sheddable_plus")
	c, err := overload.FromHeaders(h.Get)
	fmt.Println(c, err)
	h = http.Header{}
	h.Set(overload.FailsafeHeader, "4")
	c, _ = overload.FromHeaders(h.Get)
	fmt.Println(c)
	c, _ = overload.FromHeaders(http.Header{}.Get)
	fmt.Println(c)
	// Output:
	// SHEDDABLE_PLUS <nil>
	// CRITICAL_PLUS
	// CRITICAL
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
