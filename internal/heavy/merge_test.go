package heavy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestMergeReplicas: 2 to 8 replicas each count their share of a stream
// (of each distribution, in each order);
// their snapshots, through JSON, merge into the ten heaviest of the
// global counts, each within 5%, with bounds that hold the truth.
func TestMergeReplicas(t *testing.T) {
	splits := []struct {
		name string
		// to is the replica of the i-th refusal, of identity id.
		to func(r *rand.Rand, replicas, i int, id int32) int
	}{
		{"balanced", func(r *rand.Rand, replicas, _ int, _ int32) int { return r.IntN(replicas) }},
		// Each identity sticks to one replica (a connection's affinity),
		// so that most of an identity's replicas do not list it.
		{"sticky", func(_ *rand.Rand, replicas, _ int, id int32) int { return int(id) % replicas }},
		// The heavy split unevenly: half of it on replica 0, the rest
		// balanced.
		{"skewed", func(r *rand.Rand, replicas, i int, _ int32) int {
			if i%2 == 0 {
				return 0
			}
			return r.IntN(replicas)
		}},
	}
	type mergeCase struct {
		replicas, k int
		d           distribution
		o           order
	}
	var cases []mergeCase
	dists, orders := distributions(), testOrders()
	for replicas := 2; replicas <= 8; replicas++ {
		if testing.Short() && replicas != 2 && replicas != 5 && replicas != 8 {
			continue
		}
		for k := range splits {
			cases = append(cases, mergeCase{replicas, k, dists[(replicas+k)%len(dists)], orders[(replicas+k)%len(orders)]})
		}
	}
	name := func(i int) string {
		c := cases[i]
		return fmt.Sprintf("%d replicas, %s, %s, %s", c.replicas, splits[c.k].name, c.d.name, c.o.name)
	}
	inParallel(t, len(cases), name, func(t *testing.T, i int, w *worst) {
		c := cases[i]
		replicas, split, d, o := c.replicas, splits[c.k], c.d, c.o
		r := rand.New(rand.NewPCG(uint64(replicas), uint64(c.k)))
		sketches := make([]*Sketch, replicas)
		for i := range sketches {
			sketches[i] = newTestSketch(t, Options{})
		}
		for i, id := range o.lay(d.c, r) {
			sketches[split.to(r, replicas, i, id)].Observe(t0, names[id])
		}
		snaps := make([]Snapshot, replicas)
		for i, s := range sketches {
			snaps[i] = jsonRoundTrip(t, s.Snapshot(t0, 100))
		}
		merged, err := Merge(10, snaps...)
		if err != nil {
			t.Fatal(err)
		}
		checkTop(t, name(i), merged, exactOf(d.c), w)
	})
}

func jsonRoundTrip(t *testing.T, s Snapshot) Snapshot {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMergeArithmetic: an identity's Count, Min and Max add up over the
// snapshots that list it, and its Max adds the Floor of those that do
// not; the merged Floor bounds the identities no snapshot lists and those
// cut off.
func TestMergeArithmetic(t *testing.T) {
	a := Snapshot{Total: 100, Floor: 3, Top: []Entry{{"x", 50, 48, 50}, {"y", 20, 20, 20}}, End: t0}
	b := Snapshot{Total: 60, Floor: 5, Top: []Entry{{"y", 30, 29, 30}, {"z", 9, 0, 9}}, End: t0.Add(time.Second)}
	got, err := Merge(2, a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := Snapshot{Total: 160, Floor: 12, Top: []Entry{{"x", 50, 48, 55}, {"y", 50, 49, 50}}, End: t0.Add(time.Second)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Merge = %+v,\nwant %+v", got, want)
	}
	// z, cut off, was refused at most 3 (a's Floor) + 9 times: Floor is 12.
}

// TestMergeKeys: snapshots hashed under different keys, or some hashed and
// some not, are not merged.
func TestMergeKeys(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	var snaps []Snapshot
	for _, key := range [][]byte{k1, k1, k2, nil} {
		s := newTestSketch(t, Options{HashKey: key})
		s.Observe(t0, "tenant-a")
		snaps = append(snaps, s.Snapshot(t0, 10))
	}
	if _, err := Merge(10, snaps[0], snaps[1]); err != nil {
		t.Errorf("same key: %v", err)
	}
	for _, pair := range [][2]int{{0, 2}, {0, 3}, {3, 0}} {
		if _, err := Merge(10, snaps[pair[0]], snaps[pair[1]]); !errors.Is(err, ErrKeys) {
			t.Errorf("snapshots %v: err %v, want ErrKeys", pair, err)
		}
	}
}
