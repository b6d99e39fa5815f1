package overload

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestThrottleFollowsTheServer: calls all accepted are never throttled;
// calls all refused are, by criticality, and the window forgets them.
func TestThrottleFollowsTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, err := NewThrottle(ThrottleOptions{Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			if err := th.Allow(Critical); err != nil {
				t.Fatalf("throttled a call of a criticality always accepted: %v", err)
			}
			th.Record(Critical, true)
		}
		sent := 0
		for range 1000 {
			err := th.Allow(Sheddable)
			var r *Refusal
			switch {
			case err == nil:
				sent++
				th.Record(Sheddable, false)
			case !errors.As(err, &r) || r.Criticality != Sheddable:
				t.Fatalf("Allow: %v, want a Throttled Refusal", err)
			}
		}
		if sent > 50 {
			t.Fatalf("%d of 1000 always-refused calls sent, want few", sent)
		}
		if err := th.Allow(Critical); err != nil {
			t.Fatalf("Critical throttled by Sheddable's refusals: %v", err)
		}
		time.Sleep(1100 * time.Millisecond)
		if err := th.Allow(Sheddable); err != nil {
			t.Fatalf("after the window: %v, want the refusals forgotten", err)
		}
	})
}

func TestThrottleOptionsRejected(t *testing.T) {
	for _, o := range []ThrottleOptions{{K: 0.5}, {Window: -1}, {RetryAfter: -1}} {
		if _, err := NewThrottle(o); err == nil {
			t.Errorf("NewThrottle(%+v) = nil error", o)
		}
	}
}
