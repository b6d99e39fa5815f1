package fairshare

import "testing"

// TestFairShareMirrorsTheScript checks Of against hand-computed
// water-filling and spare.
func TestFairShareMirrorsTheScript(t *testing.T) {
	cases := []struct {
		limit  int64
		others []int64
		demand int64
		want   int64
	}{
		{400, []int64{10, 50, 200}, 1000, 170},
		{400, []int64{10, 50, 1000}, 200, 170},
		{400, []int64{1000, 50, 200}, 10, 10},
		{10, []int64{100, 100}, 100, 4}, // 3, 3, then the member gets 4
		{10, nil, 100, 10},
		{10, []int64{5}, 0, 1},           // 0, 5: spare 5, a quarter each
		{400, []int64{10, 50}, 200, 223}, // spare 140: 140/6 each
		{400, []int64{50, 200}, 10, 33},
	}
	for _, c := range cases {
		if got := Of(c.limit, append([]int64(nil), c.others...), c.demand); got != c.want {
			t.Errorf("Of(%d, %v, %d) = %d, want %d", c.limit, c.others, c.demand, got, c.want)
		}
	}
}
