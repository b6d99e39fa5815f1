package batchreply_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/batchreply"
)

// TestDecisionDecodes decodes every kind of answer the batch script
// sends, one after the other as in a reply, and refuses replies that end
// too early or hold a code the script never sends.
func TestDecisionDecodes(t *testing.T) {
	const now = 1_700_000_000_000_000
	reply := []int64{
		7*16 + 2, 1_500, // admitted, 7 left, full again in 1.5 ms, no sequence
		3*16 + 2 + 1, 900, // a replay: admitted, 3 left
		0, 2_000_000, 250_000, // denied, 0 left, retry in 250 ms
		-1,                    // out of range
		-2,                    // its write refused
		1<<40*16 + 2, 1 << 50, // the largest counts and durations
		5*16 + 4 + 2, 800, // admitted and written at the server time
		4*16 + 8 + 2, 700, 3, // admitted and written 3 us after it
		now, // the server time
	}
	want := [][6]int64{
		{1, 7, 0, 1_500, 0, 0},
		{1, 3, 0, 900, 1, 0},
		{0, 0, 250_000, 2_000_000, 0, 0},
		{-1, 0, 0, 0, 0, 0},
		{-2, 0, 0, 0, 0, 0},
		{1, 1 << 40, 0, 1 << 50, 0, 0},
		{1, 5, 0, 800, 0, now},
		{1, 4, 0, 700, 0, now + 3},
	}
	next := 0
	for i, w := range want {
		d, n, ok := batchreply.Decision(reply, next)
		if !ok || d != w {
			t.Fatalf("decision %d at %d: %v, %v; want %v", i, next, d, ok, w)
		}
		next = n
	}
	if next != len(reply)-1 {
		t.Fatalf("the decisions end at %d, want %d (the server time)", next, len(reply)-1)
	}

	for _, bad := range []struct {
		name  string
		reply []int64
	}{
		{"empty", nil},
		{"admitted without its reset", []int64{2}},
		{"denied without its retry", []int64{0, 5}},
		{"a code below -2", []int64{-3, 0, 0}},
		{"a denied replay", []int64{1, 5, 5, 9}},
		{"a denied write", []int64{4, 5, 5, 9}},
		{"a sequence kind 3", []int64{12 + 2, 5, 9}},
		{"a sequence without its difference", []int64{8 + 2, 5, 9}},
	} {
		if d, _, ok := batchreply.Decision(bad.reply, 0); ok {
			t.Errorf("%s %v: decoded as %v", bad.name, bad.reply, d)
		}
	}
	if _, _, ok := batchreply.Decision([]int64{2, 5}, 2); ok {
		t.Error("decoded past the reply's end")
	}
}
