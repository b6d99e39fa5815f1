package telemetry_test

import (
	"fmt"

	"github.com/tollgate/tollgate/telemetry"
)

// A test that reads overload control's metrics names the shed counter and
// the attribute it is split by.
func Example() {
	fmt.Printf("%s by %s\n", telemetry.MetricOverloadShed, telemetry.AttrCriticality)
	// Output:
	// tollgate.overload.shed by tollgate.criticality
}
