package region

import (
	"fmt"
	"time"
)

// holding is one region's holding as the Home stores it, the script's
// "window share until demand used previous".
type holding struct {
	window, share, until, demand, used, previous int64
}

func (h holding) String() string {
	return fmt.Sprintf("%d %d %d %d %d %d", h.window, h.share, h.until, h.demand, h.used, h.previous)
}

// parseHolding reads a holding as the script stores it.
func parseHolding(v string) (holding, bool) {
	var h holding
	n, err := fmt.Sscanf(v, "%d %d %d %d %d %d", &h.window, &h.share, &h.until, &h.demand, &h.used, &h.previous)
	return h, err == nil && n == 6 && h.window >= 0 && h.share >= 0 && h.until >= 0 && h.demand >= 0 && h.used >= 0 && h.previous >= 0
}

// public is h as Holding, region's, at now (µs).
func (h holding) public(region string, now int64) Holding {
	return Holding{Region: region, Window: h.window, Share: h.share, Demand: h.demand, Used: h.used,
		Left: time.Duration(h.until-now) * time.Microsecond}
}

// homeConfig is what every region must agree on, the script's "#".
func homeConfig(r Report) string { return fmt.Sprintf("%d %d %d", r.Regions, r.Floor, r.Limit.Rate) }
