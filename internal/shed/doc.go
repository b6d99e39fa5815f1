// Package shed is the mechanism of overload control (package overload
// says what it does): the adaptive concurrency limit (limit.go), the
// waiting room (waiting.go) ordered by criticality and tenant fair
// queueing (fair.go), and the Limiter that holds them under one lock
// (limiter.go). It knows no wire protocol: the engine reads a call's
// criticality and tenant, asks Acquire for a seat before the rules, and
// gives the seat back when the call ends.
package shed

import "github.com/tollgate/tollgate/overload"

// The vocabulary is package overload's.
type (
	Criticality = overload.Criticality
	Options     = overload.Options
)

const (
	Sheddable     = overload.Sheddable
	SheddablePlus = overload.SheddablePlus
	Critical      = overload.Critical
	CriticalPlus  = overload.CriticalPlus
	// Levels is the number of criticalities.
	Levels = int(CriticalPlus) + 1
)
