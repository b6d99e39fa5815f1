package shed

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/overload"
)

// failsafeHeader is failsafe-go's priority header (0 very low … 4 very
// high), read when overload.Header is absent so that callers already
// tagged for failsafe-go keep their order.
const failsafeHeader = "x-failsafe-priority"

// fromFailsafe maps failsafe-go's priorities (0 VeryLow … 4 VeryHigh) onto
// criticalities: VeryHigh is CriticalPlus, High and Medium are Critical,
// Low is SheddablePlus, VeryLow is Sheddable.
func fromFailsafe(s string) (Criticality, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 0 || p > 4 {
		return 0, fmt.Errorf("overload: %s %q: want 0 to 4", failsafeHeader, s)
	}
	return [5]Criticality{Sheddable, SheddablePlus, Critical, Critical, CriticalPlus}[p], nil
}

// CriticalityOf reads a call's criticality through get, which returns a
// header's first value or "": overload.Header first, then failsafe-go's
// x-failsafe-priority. A call with neither is Critical; so is one whose
// value does not parse (never higher), returned with the error.
func CriticalityOf(get func(key string) string) (Criticality, error) {
	if v := get(overload.Header); v != "" {
		c, err := overload.ParseCriticality(v)
		if err != nil {
			return Critical, err
		}
		return c, nil
	}
	if v := get(failsafeHeader); v != "" {
		c, err := fromFailsafe(v)
		if err != nil {
			return Critical, err
		}
		return c, nil
	}
	return Critical, nil
}
