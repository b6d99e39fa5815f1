package overload

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Criticality says how much a call matters when the server must shed
// load: a lower criticality is shed first. The names are Google's; the
// zero value is Sheddable.
type Criticality uint8

const (
	// Sheddable calls are shed first: prefetch, batch, retries of
	// background work.
	Sheddable Criticality = iota
	// SheddablePlus calls are shed before any Critical call: work a user
	// will not wait for but that should not be lost for long.
	SheddablePlus
	// Critical is the default: a call a user is waiting for.
	Critical
	// CriticalPlus calls are shed last: the calls without which the
	// service is down (login, checkout, health of the fleet).
	CriticalPlus
)

// Levels is the number of criticalities.
const Levels = int(CriticalPlus) + 1

// DefaultCriticality is the criticality of a call that carries none.
const DefaultCriticality = Critical

// Header is the metadata key (gRPC) and header (HTTP) that carries a call's
// criticality by name: CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE.
const Header = "x-tollgate-criticality"

// FailsafeHeader is failsafe-go's priority header (0 very low … 4 very
// high), read when Header is absent so that callers already tagged for
// failsafe-go keep their order.
const FailsafeHeader = "x-failsafe-priority"

var names = [Levels]string{"SHEDDABLE", "SHEDDABLE_PLUS", "CRITICAL", "CRITICAL_PLUS"}

// String returns the criticality's name as Header carries it.
func (c Criticality) String() string {
	if int(c) < Levels {
		return names[c]
	}
	return "Criticality(" + strconv.Itoa(int(c)) + ")"
}

// ParseCriticality reads a criticality's name, case-insensitively; "-"
// and "_" are alike.
func ParseCriticality(s string) (Criticality, error) {
	n := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	for i, name := range names {
		if n == name {
			return Criticality(i), nil
		}
	}
	return 0, fmt.Errorf("overload: criticality %q: want one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE", s)
}

// FromFailsafe maps failsafe-go's priorities (0 VeryLow … 4 VeryHigh) onto
// criticalities: VeryHigh is CriticalPlus, High and Medium are Critical,
// Low is SheddablePlus, VeryLow is Sheddable.
func FromFailsafe(s string) (Criticality, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 0 || p > 4 {
		return 0, fmt.Errorf("overload: %s %q: want 0 to 4", FailsafeHeader, s)
	}
	return [5]Criticality{Sheddable, SheddablePlus, Critical, Critical, CriticalPlus}[p], nil
}

// FromHeaders reads a call's criticality through get, which returns a
// header's first value or "": Header first, then FailsafeHeader. A call
// with neither gets DefaultCriticality; a value that does not parse gets
// DefaultCriticality and the error, for the door to log or refuse.
func FromHeaders(get func(key string) string) (Criticality, error) {
	if v := get(Header); v != "" {
		c, err := ParseCriticality(v)
		if err != nil {
			return DefaultCriticality, err
		}
		return c, nil
	}
	if v := get(FailsafeHeader); v != "" {
		c, err := FromFailsafe(v)
		if err != nil {
			return DefaultCriticality, err
		}
		return c, nil
	}
	return DefaultCriticality, nil
}

type criticalityKey struct{}

// WithCriticality returns ctx carrying c: the client interceptors send it
// with every call made with ctx, and a door puts the incoming call's
// criticality here so that the calls its handler makes inherit it.
func WithCriticality(ctx context.Context, c Criticality) context.Context {
	return context.WithValue(ctx, criticalityKey{}, c)
}

// CriticalityFrom returns the criticality ctx carries and whether it
// carries one.
func CriticalityFrom(ctx context.Context) (Criticality, bool) {
	c, ok := ctx.Value(criticalityKey{}).(Criticality)
	return c, ok
}
