package heavy

import (
	"math/rand/v2"
	"testing"
	"time"
)

// distribution is how many times each identity of a test stream is
// refused.
type distribution struct {
	name string
	c    counts
}

// distributions are the refusal counts the accuracy tests run: Zipf laws
// flatter and steeper than the classic one, and ten attackers among light
// identities; about a million refusals in each, over 100,000 identities.
func distributions() []distribution {
	return []distribution{
		{"zipf 0.8", zipfCounts(0.8, 1_000_000)},
		{"zipf 1.0", zipfCounts(1.0, 1_000_000)},
		{"zipf 1.2", zipfCounts(1.2, 1_000_000)},
		{"10 attackers", attackCounts(10, rand.New(rand.NewPCG(7, 7)))},
	}
}

// TestTopTenWithinFivePercent: one replica names the ten heaviest of
// 100,000 refused identities, each within 5% of its true count, in every
// distribution laid out in every order.
func TestTopTenWithinFivePercent(t *testing.T) {
	type streamCase struct {
		d distribution
		o order
	}
	var cases []streamCase
	for _, d := range distributions() {
		for _, o := range testOrders() {
			cases = append(cases, streamCase{d, o})
		}
	}
	inParallel(t, len(cases), func(i int) string { return cases[i].d.name + ", " + cases[i].o.name }, func(t *testing.T, i int, w *worst) {
		c := cases[i]
		s := newTestSketch(t, Options{})
		for _, id := range c.o.lay(c.d.c, rand.New(rand.NewPCG(1, 2))) {
			s.Observe(t0, names[id])
		}
		checkTop(t, c.d.name+", "+c.o.name, s.Snapshot(t0, 100), exactOf(c.d.c), w)
	})
}

// TestTopTenAcrossEpochs: the window adds two epochs, and an identity
// tracked in one and not the other is bounded there by its Count-Min
// estimate.
func TestTopTenAcrossEpochs(t *testing.T) {
	dists := distributions()
	inParallel(t, len(dists), func(i int) string { return dists[i].name }, func(t *testing.T, i int, w *worst) {
		d, r := dists[i], rand.New(rand.NewPCG(3, 4))
		s, now := newTestSketch(t, Options{Window: 2 * time.Minute}), t0
		// The light in both epochs, the heavy in the second only.
		heavy, light := split(d.c)
		ls := shuffled(r, expand(d.c, light))
		for _, id := range ls[:len(ls)/2] {
			s.Observe(now, names[id])
		}
		now = now.Add(time.Minute)
		for _, id := range shuffled(r, append(ls[len(ls)/2:], expand(d.c, heavy)...)) {
			s.Observe(now, names[id])
		}
		checkTop(t, d.name+", heavy in the second epoch", s.Snapshot(now, 100), exactOf(d.c), w)

		// Shuffled across both epochs.
		s, now = newTestSketch(t, Options{Window: 2 * time.Minute}), t0
		all := shuffled(r, expand(d.c, all(d.c)))
		for i, id := range all {
			if i == len(all)/2 {
				now = now.Add(time.Minute)
			}
			s.Observe(now, names[id])
		}
		checkTop(t, d.name+", shuffled over two epochs", s.Snapshot(now, 100), exactOf(d.c), w)
	})
}
