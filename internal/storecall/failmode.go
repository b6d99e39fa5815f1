package storecall

import "strconv"

// FailMode says what a rule, or a rate limit service, does when the store
// cannot decide: it erred, passed its deadline, or the breaker is open.
// The zero value is FailOpen.
type FailMode uint8

const (
	// FailOpen admits.
	FailOpen FailMode = iota
	// FailClosed refuses with codes.Unavailable: the limiter, not the
	// client, is at fault.
	FailClosed
	// FailLocal decides in process, under a per-replica cap.
	FailLocal
)

// String returns "open", "closed" or "local", the value of AttrFailMode.
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "failmode(" + strconv.Itoa(int(m)) + ")"
}

// Outcome is the outcome of a decision m took.
func (m FailMode) Outcome() Outcome {
	switch m {
	case FailClosed:
		return OutcomeFailClosed
	case FailLocal:
		return OutcomeFailLocal
	}
	return OutcomeFailOpen
}

// Stricter returns whichever of m and o decides when the store fails
// requests decided together, all or nothing: a fail-closed refusal wins
// over fail-local decisions, which win over fail-open admissions. Under
// FailClosed nothing is decided locally; under FailLocal the fail-open
// requests are admitted and the fail-local ones decided together on the
// local store.
func (m FailMode) Stricter(o FailMode) FailMode {
	if o.rank() > m.rank() {
		return o
	}
	return m
}

func (m FailMode) rank() int {
	switch m {
	case FailClosed:
		return 2
	case FailLocal:
		return 1
	}
	return 0
}
