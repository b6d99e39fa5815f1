package heavy

import (
	"math/rand/v2"
	"testing"
	"time"
)

// distributions are the refusal counts the accuracy tests run: Zipf laws
// flatter and steeper than the classic one, and ten attackers among light
// identities; about a million refusals in each, over 100,000 identities.
func distributions() []struct {
	name string
	c    counts
} {
	return []struct {
		name string
		c    counts
	}{
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
	var w worst
	for _, d := range distributions() {
		for _, o := range orders {
			r := rand.New(rand.NewPCG(1, 2))
			s := newTestSketch(t, Options{})
			for _, id := range o.lay(d.c, r) {
				s.Observe(t0, names[id])
			}
			checkTop(t, d.name+", "+o.name, s.Snapshot(t0, 100), exactOf(d.c), &w)
		}
	}
	t.Logf("largest error of a top-10 count: %.2f%% (%s)", 100*w.rel, w.what)
}

// TestTopTenAcrossEpochs: the window adds two epochs, and an identity
// tracked in one and not the other is bounded there by its Count-Min
// estimate.
func TestTopTenAcrossEpochs(t *testing.T) {
	var w worst
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range distributions() {
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
		checkTop(t, d.name+", heavy in the second epoch", s.Snapshot(now, 100), exactOf(d.c), &w)

		// Shuffled across both epochs.
		s, now = newTestSketch(t, Options{Window: 2 * time.Minute}), t0
		all := shuffled(r, expand(d.c, all(d.c)))
		for i, id := range all {
			if i == len(all)/2 {
				now = now.Add(time.Minute)
			}
			s.Observe(now, names[id])
		}
		checkTop(t, d.name+", shuffled over two epochs", s.Snapshot(now, 100), exactOf(d.c), &w)
	}
	t.Logf("largest error of a top-10 count: %.2f%% (%s)", 100*w.rel, w.what)
}
