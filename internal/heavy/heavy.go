// Package heavy names the identities a rule refuses most often over a
// recent window, in a fixed amount of memory per rule (under 1 MiB)
// however many identities are refused, cheaply enough to count every
// refusal under attack, and in snapshots that merge across replicas.
//
// A Sketch counts the refusals of one rule on one replica (Observe); its
// Snapshot lists the heaviest identities with an upper and a lower bound
// of each count; Merge adds the snapshots of several replicas. With a
// HashKey, identities are shown as a keyed hash (OpaqueID), never as the
// credential they may be.
package heavy

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultWindow = 2 * time.Minute
	DefaultEpochs = 2
	// MaxEpochs is the most epochs a window may be cut into.
	MaxEpochs = 8
)

// Options configure a Sketch. The zero value counts the last one to two
// minutes and shows identities as they are.
//
// Epochs start at multiples of their length since the Unix epoch, so
// replicas whose clocks agree count the same window.
type Options struct {
	// Window is the longest a refusal is counted: the window is cut into
	// Epochs epochs, and a snapshot counts the current one and the
	// Epochs-1 before it, so a refusal is counted for at least
	// Window·(Epochs-1)/Epochs. An epoch must last at least a second.
	// Zero is DefaultWindow.
	Window time.Duration
	// Epochs is how many epochs the window is cut into, from 2 to
	// MaxEpochs. More epochs make the window's end smoother; each has a
	// share of the same memory. Zero is DefaultEpochs.
	Epochs int
	// HashKey, when set (at least MinKeyLen bytes), shows identities as
	// OpaqueID(HashKey, identity). Replicas whose snapshots are merged
	// must share it.
	HashKey []byte
}

// ErrOptions is wrapped by every error New returns.
var ErrOptions = errors.New("heavy: bad options")

// shards is how many independently locked parts a Sketch counts in, an
// identity in the one its fingerprint picks.
const shards = 8

// A Sketch's memory, shared by its epochs and shards: each epoch of each
// shard tracks its share of tracked identities, about 100 bytes each, in
// front of a Count-Min of its share of cmBytes (see summary); with the
// default two epochs, 128 identities and 2,560 columns of four cells.
// TestMemory measures the whole: 863 KiB.
const (
	tracked = 2048
	cmBytes = 640 << 10
)

// Sketch counts one rule's refusals by identity. It is safe for concurrent
// use; it starts no goroutine (epochs turn over when the sketch is next
// used) and allocates the memory of a shard's epoch on its first refusal.
type Sketch struct {
	epochLen int64 // nanoseconds
	epochs   int
	seed     maphash.Seed
	key      []byte
	keyID    string
	shards   [shards]shard
}

// shard is the part of a Sketch that counts the identities whose
// fingerprints end in its number.
type shard struct {
	mu    sync.Mutex
	epoch int64      // the number of the epoch ring[slot(epoch)] counts
	ring  []*summary // an epoch's summary, nil until it is first used
	label labeler
	_     [64]byte // keeps neighbouring shards' locks off one cache line
}

// New returns a Sketch configured by o, or an error wrapping ErrOptions.
func New(o Options) (*Sketch, error) {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Epochs == 0 {
		o.Epochs = DefaultEpochs
	}
	switch {
	case o.Epochs < 2 || o.Epochs > MaxEpochs:
		return nil, fmt.Errorf("%w: Epochs is %d, not from 2 to %d", ErrOptions, o.Epochs, MaxEpochs)
	case o.Window < time.Duration(o.Epochs)*time.Second:
		return nil, fmt.Errorf("%w: Window %v cut into %d epochs makes epochs shorter than a second", ErrOptions, o.Window, o.Epochs)
	case o.HashKey != nil && len(o.HashKey) < MinKeyLen:
		return nil, fmt.Errorf("%w: HashKey is %d bytes, fewer than %d", ErrOptions, len(o.HashKey), MinKeyLen)
	}
	s := &Sketch{
		epochLen: int64(o.Window) / int64(o.Epochs),
		epochs:   o.Epochs,
		seed:     maphash.MakeSeed(),
		key:      append([]byte(nil), o.HashKey...),
		keyID:    keyID(o.HashKey),
	}
	for i := range s.shards {
		s.shards[i].ring = make([]*summary, o.Epochs)
		s.shards[i].epoch = math.MinInt64
	}
	return s, nil
}

// Observe counts one refusal of identity at now. Time is the caller's, as
// in golang.org/x/time/rate: a limiter passes the time it read for the
// call. A time earlier than one already seen counts in the later epoch.
func (s *Sketch) Observe(now time.Time, identity string) {
	fp := maphash.String(s.seed, identity)
	epoch := s.epochOf(now)
	sh := &s.shards[fp%shards]
	sh.mu.Lock()
	sh.current(s, epoch).observe(fp, identity, &sh.label)
	sh.mu.Unlock()
}

func (s *Sketch) epochOf(t time.Time) int64 { return t.UnixNano() / s.epochLen }

// current turns sh over to epoch, unless it is in a later one (the clock
// went back), and returns the summary of its current epoch.
func (sh *shard) current(s *Sketch, epoch int64) *summary {
	sh.turn(epoch)
	i := sh.slot(sh.epoch)
	if sh.ring[i] == nil {
		sh.ring[i] = newSummary(tracked/shards/s.epochs, cmBytes/4/rows/shards/s.epochs)
		if sh.label.plain == nil {
			sh.label = newLabeler(s.key)
		}
	}
	return sh.ring[i]
}

// turn forgets the epochs that ended more than a window before epoch.
func (sh *shard) turn(epoch int64) {
	if epoch <= sh.epoch {
		return
	}
	for e := max(sh.epoch+1, epoch-int64(len(sh.ring))+1); e <= epoch; e++ {
		if sum := sh.ring[sh.slot(e)]; sum != nil {
			sum.clear()
		}
	}
	sh.epoch = epoch
}

// slot is the place of epoch's summary in the ring.
func (sh *shard) slot(epoch int64) int {
	n := int64(len(sh.ring))
	return int((epoch%n + n) % n)
}
