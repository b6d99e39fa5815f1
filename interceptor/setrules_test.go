package interceptor_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/examples/echo"
	"github.com/tollgate/tollgate/interceptor"
	"github.com/tollgate/tollgate/keyfunc"
)

// SetRules swaps the rules whole: a rule that keeps its name keeps its
// callers' buckets, a rejected set changes nothing, and a rule renamed
// starts afresh while its old name is unknown.
func TestSetRules(t *testing.T) {
	u := newUnit(t, interceptor.WithRules(perTenant()))
	for range 2 {
		if err := u.call("a", echo.SayMethod, ok); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.call("a", echo.CountMethod, ok); err != nil {
		t.Fatalf("a method no rule matches: %v", err)
	}

	wider := perTenant()
	wider.Methods = append(wider.Methods, echo.CountMethod)
	if err := u.l.SetRules(wider); err != nil {
		t.Fatal(err)
	}
	if got := u.available(t, "per-tenant", "a"); got != 1 {
		t.Fatalf("available = %d after SetRules kept the name, want 1: the bucket carries over", got)
	}
	if err := u.call("a", echo.CountMethod, ok); err != nil {
		t.Fatalf("the method the new rules match: %v", err)
	}
	wantCode(t, u.call("a", echo.SayMethod, ok), codes.ResourceExhausted, "exceeded")

	bad := perTenant()
	bad.Limits = interceptor.Fixed(tollgate.Limit{Rate: -1})
	if err := u.l.SetRules(wider, bad); err == nil {
		t.Fatal("SetRules accepted a duplicate name and a bad limit")
	}
	if rs := u.l.Rules(); len(rs) != 1 || !slices.Equal(rs[0].Methods, wider.Methods) {
		t.Fatalf("Rules after a rejected SetRules = %+v, want the rules before it", rs)
	}
	badKey := perTenant()
	badKey.Key = keyfunc.Metadata("X Tenant")
	const wantErr = `engine: rule "per-tenant": Key: keyfunc.Metadata: "X Tenant" is not a valid gRPC metadata key (0-9 a-z - _ .)`
	if err := u.l.SetRules(badKey); err == nil || err.Error() != wantErr {
		t.Fatalf("SetRules with a bad header: %v, want %q", err, wantErr)
	}

	renamed := perTenant()
	renamed.Name = "per-tenant-v2"
	if err := u.l.SetRules(renamed); err != nil {
		t.Fatal(err)
	}
	_, err := u.l.Peek(context.Background(), "per-tenant", interceptor.Caller{Value: "a"})
	if !errors.Is(err, engine.ErrUnknownRule) || status.Code(err) != codes.NotFound {
		t.Fatalf("Peek of the old name: %v, want ErrUnknownRule and NotFound", err)
	}
	if got := u.available(t, "per-tenant-v2", "a"); got != 3 {
		t.Fatalf("available = %d under the new name, want 3", got)
	}
	if err := u.call("a", echo.CountMethod, ok); err != nil {
		t.Fatalf("a method the new rules no longer match: %v", err)
	}
}

// Rules is a deep copy: writing into it, or into the rules given to New,
// changes nothing in the Limiter.
func TestRulesIsADeepCopy(t *testing.T) {
	local := tollgate.PerHour(1)
	r := perTenant()
	r.Methods = []string{echo.SayMethod, echo.CountMethod}
	fixed := []tollgate.Limit{tollgate.PerHour(3), tollgate.PerMinute(3)}
	r.Limits = interceptor.Fixed(fixed...)
	r.FailMode = engine.FailLocalAt(local)
	u := newUnit(t, interceptor.WithRules(r), func(c *engine.Config) { c.LocalStore = newMemory(t) })
	r.Methods[0], fixed[0] = "/x.Y/Z", tollgate.PerHour(1000)

	got := u.l.Rules()
	got[0].Methods[1] = "/x.Y/Z"
	got[0].Limits.List()[1] = tollgate.PerHour(1000)
	again := u.l.Rules()[0]
	if at, _ := again.FailMode.LocalLimit(); !slices.Equal(again.Methods, []string{echo.SayMethod, echo.CountMethod}) ||
		!slices.Equal(again.Limits.List(), []tollgate.Limit{tollgate.PerHour(3), tollgate.PerMinute(3)}) ||
		at != tollgate.PerHour(1) {
		t.Fatalf("Rules = %+v, FailLocalAt %v: a write into a copy reached the Limiter", again, at)
	}
	if err := u.call("a", echo.SayMethod, ok); err != nil {
		t.Fatal(err)
	}
	if got := u.available(t, "per-tenant", "a"); got != 2 {
		t.Fatalf("available = %d, want 2 of the rule's 3", got)
	}
}

// Peek debits nothing and records no request id: asked twice it answers
// the same, and a call then finds the whole quota.
func TestPeekDebitsNothing(t *testing.T) {
	u := newUnit(t, interceptor.WithRules(perTenant()))
	for range 3 {
		if got := u.available(t, "per-tenant", "a"); got != 3 {
			t.Fatalf("available = %d, want 3", got)
		}
	}
	if err := u.call("a", echo.SayMethod, ok); err != nil {
		t.Fatal(err)
	}
	qs, err := u.l.Peek(context.Background(), "per-tenant", interceptor.Caller{Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Available != 2 || qs[0].Decision.Remaining != 1 || !qs[0].Decision.Allowed || qs[0].Cost != 1 || qs[0].Limit != tollgate.PerHour(3) {
		t.Fatalf("Peek = %+v, want 2 available, 1 left after a call of 1", qs)
	}
	if _, err := u.l.Peek(context.Background(), "per-tenant", interceptor.Caller{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Peek of no caller: %v, want InvalidArgument", err)
	}
}
