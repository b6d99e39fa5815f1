package admitlog

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

func TestWorstSpan(t *testing.T) {
	var l Log
	t0 := time.Unix(1000, 0)
	for i := range 10 {
		l.Add(i%2, t0.Add(time.Duration(i)*100*time.Millisecond), 10) // 10 units every 100ms
	}
	l.Add(1, t0.Add(950*time.Millisecond), 50)
	w := l.Worst(tollgate.PerSecond(100), 200*time.Millisecond)
	if w.Units != 70 || w.Allowed != 120 || w.ByRegion[1] != 60 || !w.Ends.Equal(t0.Add(950*time.Millisecond)) {
		t.Errorf("worst 200ms span: %+v, want 70 units (60 of region 1) ending at 950ms, 120 allowed", w)
	}
	if got := l.Units(-1, t0, t0.Add(time.Second)); got != 150 {
		t.Errorf("units in the first second: %d, want 150", got)
	}
	if got := l.Units(0, t0, t0.Add(time.Second)); got != 50 {
		t.Errorf("units of region 0: %d, want 50", got)
	}
}
