package partkey_test

import (
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
)

// A part key is the identity, the separator and the part; a limit's part
// is its period, or for a calendar limit (which has no Period) the
// calendar's name.
func TestJoinAndForLimit(t *testing.T) {
	if got := partkey.Join("tenant-7", "1s"); got != "tenant-7\x1f1s" {
		t.Errorf("Join = %q", got)
	}
	for l, want := range map[tollgate.Limit]string{
		tollgate.PerSecond(1): "1s",
		tollgate.PerHour(1):   "1h0m0s",
		tollgate.Daily(1):     "daily",
		tollgate.Monthly(1):   "monthly",
	} {
		if got := partkey.ForLimit(l); got != want {
			t.Errorf("ForLimit(%v) = %q, want %q", l, got, want)
		}
	}
}
