package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// runOverrides checks an OverrideStore.
func (s *suite) runOverrides(t *testing.T) {
	os, ok := s.h.Store.(tollgate.OverrideStore)
	if !ok {
		t.Skipf("%T is not a tollgate.OverrideStore", s.h.Store)
	}
	ctx := context.Background()
	scope := s.key(t)
	v0, err := os.OverridesVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limits := []tollgate.Limit{tollgate.PerMinute(5), tollgate.Daily(100)}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "a", Limits: limits}, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "b"}, 4*s.unit); err != nil {
		t.Fatal(err)
	}
	if v, err := os.OverridesVersion(ctx); err != nil || v == v0 {
		t.Fatalf("version after two overrides: %d, %v; want it changed from %d", v, err, v0)
	}
	list, err := os.Overrides(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list, func(x, y tollgate.Override) int { return len(y.Limits) - len(x.Limits) })
	if len(list) != 2 || list[0].Key != "a" || !slices.Equal(list[0].Limits, limits) || !list[0].Expires.IsZero() ||
		list[1].Key != "b" || len(list[1].Limits) != 0 || list[1].Expires.IsZero() {
		t.Fatalf("Overrides = %+v; want a with its limits forever and b blocked for a while", list)
	}
	if other, err := os.Overrides(ctx, scope+"/other"); err != nil || len(other) != 0 {
		t.Fatalf("another scope's overrides: %+v, %v; want none", other, err)
	}
	s.h.Advance(4*s.unit + s.unit)
	if list, err := os.Overrides(ctx, scope); err != nil || len(list) != 1 || list[0].Key != "a" {
		t.Fatalf("after b's TTL: %+v, %v; want a alone", list, err)
	}
	if err := os.DeleteOverride(ctx, scope, "a"); err != nil {
		t.Fatal(err)
	}
	if list, err := os.Overrides(ctx, scope); err != nil || len(list) != 0 {
		t.Fatalf("after deleting a: %+v, %v; want none", list, err)
	}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "c", Limits: []tollgate.Limit{{Rate: -1}}}, 0); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("an invalid limit: %v, want ErrInvalidRequest", err)
	}
	if err := os.SetOverride(ctx, scope, tollgate.Override{Key: "c"}, -time.Second); !errors.Is(err, tollgate.ErrInvalidRequest) {
		t.Fatalf("a negative TTL: %v, want ErrInvalidRequest", err)
	}
}
