package heavy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// distinct is how many identities every test stream refuses.
const distinct = 100_000

// names are the identities of the test streams, by number.
var names = func() []string {
	out := make([]string, distinct)
	for i := range out {
		out[i] = fmt.Sprintf("tenant-%06d", i)
	}
	return out
}()

// t0 is the start of an epoch of every window used in the tests.
var t0 = time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)

// counts gives each identity how many times it is refused.
type counts []int

// zipfCounts is a Zipf law of exponent s over distinct identities, the
// heaviest first, about total refusals in all, each identity at least one.
func zipfCounts(s float64, total int) counts {
	var h float64
	for i := 1; i <= distinct; i++ {
		h += math.Pow(float64(i), -s)
	}
	c := make(counts, distinct)
	for i := range c {
		c[i] = max(1, int(float64(total)/h*math.Pow(float64(i+1), -s)))
	}
	return c
}

// attackCounts is a few attackers (1000, 2000, … refusals each) among
// light identities refused one to ten times each.
func attackCounts(attackers int, r *rand.Rand) counts {
	c := make(counts, distinct)
	for i := range c {
		c[i] = 1 + r.IntN(10)
	}
	for i, at := range r.Perm(distinct)[:attackers] {
		c[at] = 1000 * (i + 1)
	}
	return c
}

// An order lays the refusals of counts out as a stream of identities.
type order struct {
	name string
	lay  func(c counts, r *rand.Rand) []int32
}

var orders = []order{
	{"shuffled", func(c counts, r *rand.Rand) []int32 { return shuffled(r, expand(c, all(c))) }},
	// Space-Saving's worst: every identity arrives after all the lighter
	// ones, so the heaviest enter last, when the summary is most worn.
	{"lightest first", func(c counts, _ *rand.Rand) []int32 {
		ids := all(c)
		slices.SortStableFunc(ids, func(a, b int32) int { return c[a] - c[b] })
		return expand(c, ids)
	}},
	// The heavy, shuffled among themselves, after the light, shuffled.
	{"heavy last", func(c counts, r *rand.Rand) []int32 {
		heavy, light := split(c)
		return append(shuffled(r, expand(c, light)), shuffled(r, expand(c, heavy))...)
	}},
	// The heavy first, then a flood of the light that must not push them out.
	{"heavy first", func(c counts, r *rand.Rand) []int32 {
		heavy, light := split(c)
		return append(shuffled(r, expand(c, heavy)), shuffled(r, expand(c, light))...)
	}},
	// Round robin: one refusal of every identity left per pass, so that
	// all the identities churn between two refusals of a heavy one.
	{"round robin", func(c counts, _ *rand.Rand) []int32 {
		ids := topIDs(c, len(c))
		var out []int32
		for pass, n := 0, len(ids); n > 0; pass++ {
			for n > 0 && c[ids[n-1]] <= pass {
				n--
			}
			out = append(out, ids[:n]...)
		}
		return out
	}},
	// The heavy in ten bursts, each after a tenth of the light flood.
	{"bursts", func(c counts, r *rand.Rand) []int32 {
		heavy, light := split(c)
		hs, ls := shuffled(r, expand(c, heavy)), shuffled(r, expand(c, light))
		var out []int32
		for i := range 10 {
			out = append(out, ls[i*len(ls)/10:(i+1)*len(ls)/10]...)
			out = append(out, hs[i*len(hs)/10:(i+1)*len(hs)/10]...)
		}
		return out
	}},
}

func all(c counts) []int32 {
	ids := make([]int32, len(c))
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

// split parts the identities into the 100 heaviest and the others.
func split(c counts) (heavy, light []int32) {
	ids := topIDs(c, 100)
	in := map[int32]bool{}
	for _, id := range ids {
		in[id] = true
	}
	for _, id := range all(c) {
		if !in[id] {
			light = append(light, id)
		}
	}
	return ids, light
}

// topIDs is the n heaviest identities, heaviest first.
func topIDs(c counts, n int) []int32 {
	ids := all(c)
	slices.SortStableFunc(ids, func(a, b int32) int { return c[b] - c[a] })
	return ids[:n]
}

func expand(c counts, ids []int32) []int32 {
	var out []int32
	for _, id := range ids {
		for range c[id] {
			out = append(out, id)
		}
	}
	return out
}

func shuffled(r *rand.Rand, s []int32) []int32 {
	r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

func newTestSketch(t testing.TB, o Options) *Sketch {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// exact is the true refusals of each identity, by how it is shown.
type exact map[string]int

func exactOf(c counts) exact {
	ex := exact{}
	for i, n := range c {
		if n > 0 {
			ex[names[i]] = n
		}
	}
	return ex
}

// testOrders are the orders a test lays its streams out in: with -short,
// a shuffle and the worst order for Space-Saving.
func testOrders() []order {
	if testing.Short() {
		return orders[:2]
	}
	return orders
}

// worst is the largest relative error of a top-10 count, over the
// streams a test ran.
type worst struct {
	mu   sync.Mutex
	rel  float64
	what string
}

func (w *worst) see(rel float64, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rel > w.rel {
		w.rel, w.what = rel, what
	}
}

// inParallel runs run(t, i, w) for every i < n as parallel subtests named
// name(i), then logs the largest error of a top-10 count they saw.
func inParallel(t *testing.T, n int, name func(i int) string, run func(t *testing.T, i int, w *worst)) {
	var w worst
	t.Run("cases", func(t *testing.T) {
		for i := range n {
			t.Run(name(i), func(t *testing.T) {
				t.Parallel()
				run(t, i, &w)
			})
		}
	})
	t.Logf("largest error of a top-10 count: %.2f%% (%s)", 100*w.rel, w.what)
}

// checkTop checks that snap names the ten heaviest identities of ex, each
// within 5% of its true count; that the bounds of every listed identity
// hold its true count; that Floor bounds every identity not listed; and
// that Total is exact.
func checkTop(t *testing.T, what string, snap Snapshot, ex exact, w *worst) {
	t.Helper()
	var total int
	want := make([]string, 0, len(ex))
	for id, n := range ex {
		total += n
		want = append(want, id)
	}
	slices.SortFunc(want, func(a, b string) int { return ex[b] - ex[a] })
	if snap.Total != uint64(total) {
		t.Errorf("%s: Total %d, want %d", what, snap.Total, total)
	}
	if len(snap.Top) < 10 {
		t.Fatalf("%s: %d identities listed, want at least 10", what, len(snap.Top))
	}
	for i, e := range snap.Top[:10] {
		if ex[e.ID] < ex[want[9]] {
			t.Errorf("%s: #%d is %s refused %d times, lighter than the 10th heaviest %s (%d)", what, i+1, e.ID, ex[e.ID], want[9], ex[want[9]])
		}
		rel := math.Abs(float64(e.Count)-float64(ex[e.ID])) / float64(ex[e.ID])
		w.see(rel, fmt.Sprintf("%s: %s counted %d of %d, in [%d, %d]", what, e.ID, e.Count, ex[e.ID], e.Min, e.Max))
		if rel > 0.05 {
			t.Errorf("%s: %s counted %d, true %d: off by %.1f%%", what, e.ID, e.Count, ex[e.ID], 100*rel)
		}
	}
	listed := map[string]bool{}
	for _, e := range snap.Top {
		listed[e.ID] = true
		if n := uint64(ex[e.ID]); n > e.Max || n < e.Min {
			t.Errorf("%s: %s refused %d times, outside its bounds [%d, %d]", what, e.ID, n, e.Min, e.Max)
		}
	}
	for id, n := range ex {
		if !listed[id] && uint64(n) > snap.Floor {
			t.Errorf("%s: %s refused %d times, unlisted, above Floor %d", what, id, n, snap.Floor)
		}
	}
}
