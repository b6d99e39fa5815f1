package overload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
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
	// Critical is the criticality of a call that carries none: a call a
	// user is waiting for.
	Critical
	// CriticalPlus calls are shed last: the calls without which the
	// service is down (login, checkout, health of the fleet).
	CriticalPlus
)

// levels is the number of criticalities.
const levels = int(CriticalPlus) + 1

// Header is the metadata key (gRPC) and header (HTTP) that carries a call's
// criticality by name: CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE.
const Header = "x-tollgate-criticality"

var names = [levels]string{"SHEDDABLE", "SHEDDABLE_PLUS", "CRITICAL", "CRITICAL_PLUS"}

// String returns the criticality's name as Header carries it.
func (c Criticality) String() string {
	if int(c) < levels {
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

// RetryAfter is the wait to suggest to a refused call of criticality c:
// base for CriticalPlus, one base more for each level below, times a
// uniform factor in [0.5, 1.5) so that the calls refused together do not
// come back together.
func (c Criticality) RetryAfter(base time.Duration) time.Duration {
	d := float64(base) * float64(levels-int(min(c, CriticalPlus)))
	return time.Duration(d * (0.5 + rand.Float64()))
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
