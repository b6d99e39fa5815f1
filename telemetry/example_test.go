package telemetry_test

import (
	"fmt"

	"github.com/tollgate/tollgate/telemetry"
)

// A dashboard's query names the decisions counter and its attributes.
func Example() {
	fmt.Printf("%s by %s, %s\n", telemetry.MetricDecisions, telemetry.AttrRule, telemetry.AttrOutcome)
	fmt.Printf("%s by %s\n", telemetry.MetricSeats, telemetry.AttrSeatOutcome)
	// Output:
	// tollgate.decisions by tollgate.rule, tollgate.outcome
	// tollgate.seats by tollgate.seat.outcome
}
