package shed

import (
	"testing"

	"github.com/tollgate/tollgate/overload"
)

// TestBadHeaderNeverRaisesCriticality: a value that does not parse counts
// as the default, never higher, and says why.
func TestBadHeaderNeverRaisesCriticality(t *testing.T) {
	for _, h := range []map[string]string{
		{overload.Header: "ULTRA"},
		{failsafeHeader: "7"},
		{failsafeHeader: "high"},
	} {
		c, err := CriticalityOf(func(k string) string { return h[k] })
		if err == nil || c != Critical {
			t.Errorf("CriticalityOf(%v) = %v, %v; want the default and an error", h, c, err)
		}
	}
	c, err := CriticalityOf(func(k string) string { return map[string]string{overload.Header: "SHEDDABLE", failsafeHeader: "4"}[k] })
	if err != nil || c != Sheddable {
		t.Errorf("with both headers: %v, %v; want Header's Sheddable", c, err)
	}
	for p, want := range []Criticality{Sheddable, SheddablePlus, Critical, Critical, CriticalPlus} {
		if c, err := fromFailsafe(string(rune('0' + p))); err != nil || c != want {
			t.Errorf("fromFailsafe(%d) = %v, %v; want %v", p, c, err, want)
		}
	}
}
