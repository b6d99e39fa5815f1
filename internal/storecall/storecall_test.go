package storecall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/lease"
)

// defaultConfig is package interceptor's default settings.
var defaultConfig = Config{Timeout: 50 * time.Millisecond, BreakerFailures: 5, BreakerCoolDown: time.Second}

// nopStore stands for a store on a network: the policy gives its calls a
// deadline.
type nopStore struct{ tollgate.Store }

func newPolicy(t *testing.T, st tollgate.Store, c Config) *Policy {
	t.Helper()
	p, err := New(st, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewRejectsBadSettings(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Timeout: 0}, "store timeout must be > 0"},
		{Config{Timeout: time.Second, BreakerFailures: -1}, "breaker failures must be >= 0"},
		{Config{Timeout: time.Second, BreakerFailures: 3}, "breaker cool-down must be > 0"},
	} {
		if _, err := New(nopStore{}, c.cfg); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := New(nopStore{}, Config{Timeout: time.Second}); err != nil {
		t.Errorf("breaker disabled: %v", err)
	}
}

// TestResults: what each kind of error says about the store.
func TestResults(t *testing.T) {
	p := newPolicy(t, nopStore{}, Config{Timeout: time.Second})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want Result
	}{
		{"answered", context.Background(), nil, Decided},
		{"answered after the caller left", canceled, nil, Decided},
		{"invalid request", context.Background(), fmt.Errorf("store: %w", tollgate.ErrInvalidRequest), Invalid},
		{"invalid request after the caller left", canceled, tollgate.ErrInvalidRequest, Invalid},
		{"caller left", canceled, context.Canceled, Canceled},
		{"store error", context.Background(), errors.New("connection refused"), Failed},
		{"store deadline", context.Background(), context.DeadlineExceeded, Failed},
	} {
		r, _, err := p.Do(c.ctx, func(context.Context) error { return c.err })
		if r != c.want || err != c.err {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, r, err, c.want, c.err)
		}
	}
}

// TestDeadline: a store on a network gets the policy's deadline under the
// caller's context; store.Memory, which never waits, gets the caller's
// context as it is.
func TestDeadline(t *testing.T) {
	p := newPolicy(t, nopStore{}, Config{Timeout: 20 * time.Millisecond})
	start := time.Now()
	r, elapsed, err := p.Do(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if r != Failed || !errors.Is(err, context.DeadlineExceeded) || elapsed < 20*time.Millisecond || time.Since(start) > 5*time.Second {
		t.Fatalf("hung store: %d, %v after %s; want Failed by the deadline", r, err, elapsed)
	}
	ctx := context.Background()
	// In process: the Memory store, and the local tier over it; the tier
	// over a store on a network is not.
	for name, st := range map[string]tollgate.Store{
		"store.Memory":         newMemory(t),
		"lease over Memory":    mustLease(t, newMemory(t)),
		"lease over a network": mustLease(t, nopStore{}),
	} {
		c, ok := newPolicy(t, st, defaultConfig).Open(ctx)
		if !ok {
			t.Fatalf("%s: Open refused", name)
		}
		if inProcess := c.Ctx == ctx; inProcess != !strings.Contains(name, "network") {
			t.Errorf("%s: the call's context is the caller's: %v", name, inProcess)
		}
		c.End(nil)
	}
}

func mustLease(t *testing.T, inner tollgate.Store) tollgate.Store {
	t.Helper()
	st, err := lease.New(inner)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBreaker: consecutive failures open the breaker; invalid requests and
// callers gone first do not count.
func TestBreaker(t *testing.T) {
	p := newPolicy(t, nopStore{}, Config{Timeout: time.Second, BreakerFailures: 2, BreakerCoolDown: time.Hour})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	do := func(ctx context.Context, err error) Result {
		r, _, _ := p.Do(ctx, func(context.Context) error { calls++; return err })
		return r
	}
	for range 3 {
		do(context.Background(), tollgate.ErrInvalidRequest)
		do(canceled, context.Canceled)
	}
	do(context.Background(), errors.New("down"))
	if r := do(context.Background(), errors.New("down")); r != Failed {
		t.Fatalf("second failure: %d", r)
	}
	if r := do(context.Background(), nil); r != Unasked || calls != 8 {
		t.Fatalf("after two failures: %d with %d calls, want Unasked with 8", r, calls)
	}
	if _, ok := p.Open(context.Background()); ok {
		t.Fatal("Open let a call through an open breaker")
	}
}

func TestResultClasses(t *testing.T) {
	for r, want := range map[Result]bool{Decided: true, Invalid: false, Canceled: false, Failed: true, Unasked: false} {
		if r.Measured() != want {
			t.Errorf("result %d: measured %v, want %v", r, r.Measured(), want)
		}
	}
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for o := range NumOutcomes {
		if name := o.String(); name == "" || seen[name] {
			t.Errorf("outcome %d: name %q empty or repeated", o, name)
		} else {
			seen[name] = true
		}
	}
	if OutcomeShadowDenied.String() != "shadow_denied" || OutcomeFailClosed.String() != "fail_closed" {
		t.Error("outcome names changed")
	}
}

// TestOpenEndAllocateNothing: for store.Memory, whose calls get no
// deadline, a store call under the policy costs no allocation, so that the
// interceptors' admitted call does not pay for it (BenchmarkUnaryAdmit).
func TestOpenEndAllocateNothing(t *testing.T) {
	p := newPolicy(t, newMemory(t), defaultConfig)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		c, ok := p.Open(ctx)
		if ok {
			c.End(nil)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func BenchmarkOpenEnd(b *testing.B) {
	for _, st := range []tollgate.Store{newMemory(b), nopStore{}} {
		p, _ := New(st, defaultConfig)
		b.Run(fmt.Sprintf("%T", st), func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				c, _ := p.Open(ctx)
				c.End(nil)
			}
		})
	}
}
