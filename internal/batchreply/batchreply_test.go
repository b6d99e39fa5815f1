package batchreply_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/batchreply"
)

// TestDecisionDecodes decodes every kind of answer the batch script
// sends, one after the other as in a reply, and refuses replies that end
// too early or hold a code the script never sends.
func TestDecisionDecodes(t *testing.T) {
	const now, seq = 1_700_000_000_000_000, 1_700_000_000_000_003
	reply := []int64{
		7*8 + 4 + 2, 1_500, // admitted and written, 7 left, full again in 1.5 ms
		3*8 + 2 + 1, 900, // a replay: admitted, 3 left, nothing written
		0, 2_000_000, 250_000, // denied, 0 left, retry in 250 ms
		-1,                       // out of range
		-2,                       // its write refused
		1<<40*8 + 4 + 2, 1 << 50, // the largest counts and durations
		6*8 + 2, 50, // admitted, nothing written: a peek
		seq, // the call's sequence
		now, // the server time
	}
	want := [][6]int64{
		{1, 7, 0, 1_500, 0, seq},
		{1, 3, 0, 900, 1, 0},
		{0, 0, 250_000, 2_000_000, 0, 0},
		{-1, 0, 0, 0, 0, 0},
		{-2, 0, 0, 0, 0, 0},
		{1, 1 << 40, 0, 1 << 50, 0, seq},
		{1, 6, 0, 50, 0, 0},
	}
	next := 0
	for i, w := range want {
		d, n, ok := batchreply.Decision(reply, next)
		if !ok || d != w {
			t.Fatalf("decision %d at %d: %v, %v; want %v", i, next, d, ok, w)
		}
		next = n
	}
	if next != len(reply)-batchreply.Tail {
		t.Fatalf("the decisions end at %d, want %d (the sequence and the server time)", next, len(reply)-batchreply.Tail)
	}

	for _, bad := range []struct {
		name  string
		reply []int64
	}{
		{"empty", nil},
		{"admitted without its reset", []int64{2, 0, 9}},
		{"denied without its retry", []int64{0, 5, 0, 9}},
		{"a code below -2", []int64{-3, 0, 0, 0, 9}},
		{"a denied replay", []int64{1, 5, 5, 0, 9}},
		{"a denied write", []int64{4, 5, 5, 0, 9}},
		{"a replay that wrote", []int64{4 + 2 + 1, 5, 0, 9}},
		{"no tail", []int64{2, 5}},
	} {
		if d, _, ok := batchreply.Decision(bad.reply, 0); ok {
			t.Errorf("%s %v: decoded as %v", bad.name, bad.reply, d)
		}
	}
	if _, _, ok := batchreply.Decision([]int64{2, 5, 0, 9}, 2); ok {
		t.Error("decoded the tail as a decision")
	}
}
