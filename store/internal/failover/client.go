package failover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/lua"
)

// Config is what a client's failover machinery needs from the store that
// makes it (the first store on the client).
type Config struct {
	// Client is the store's go-redis client; Cluster is the same client
	// when it is a *redis.ClusterClient.
	Client  redis.UniversalClient
	Cluster *redis.ClusterClient
	// Window is how long a write is kept at most, MaxBytes the journal's
	// memory cap.
	Window   time.Duration
	MaxBytes int64
	// Exactness says when the gates stamp their calls; the grace of
	// WhenReplicated is Window.
	Exactness Exactness
	Log       *slog.Logger
	Meter     metric.MeterProvider
	// Run sends calls on the store's send path (EVALSHA, EVAL on NOSCRIPT,
	// a call that was not run sent again), each call's Reply or Err and
	// Era set once it returns.
	Run func(ctx context.Context, calls []ScriptCall)
	// Stamped says where a command's era goes (see GateConfig.Stamped).
	Stamped func(args []any) (int, bool)
	// SeatHoldTTL is how long the seat script keeps an identity's mean
	// hold time (its ARGV[2]).
	SeatHoldTTL time.Duration
}

// ScriptCall is one script call the machinery sends (a restore, a seat
// restored) through Config.Run.
type ScriptCall struct {
	Script lua.Script
	// Args are EVALSHA's arguments, its first two left for Run to fill:
	// nil, nil, numkeys, KEYS..., ARGV..., with the era in ARGV[1].
	Args  []any
	Reply []int64
	Era   string // the era the call was stamped with
	Err   error
}

// A Client is the failover machinery of one go-redis client, shared by
// every store on it: the journal, the gate of each primary and the
// watcher, which restore what a new primary lacks (restore.go).
type Client struct {
	cfg     Config
	journal *Journal
	watcher *Watcher
	// id names this process's restore records (lua/doc.go, Restore), which
	// live recordTTL.
	id        string
	recordTTL time.Duration
	log       *slog.Logger
	blind     sync.Once // the warning that a server refuses INFO, once

	mu     sync.Mutex
	gates  map[string]*Gate       // by node address; "" for a *redis.Client's one server
	hooked map[*redis.Client]bool // the clients a gate is on
	ids    map[string]string      // a Cluster node's id, by address
	stores int                    // stores sharing it, not closed

	restoredUnits atomic.Int64
}

// New returns the failover machinery of cfg.Client, with no gate yet
// (Install puts one before each primary) and no store (Attach).
func New(cfg Config) *Client {
	f := &Client{
		cfg:     cfg,
		journal: NewJournal(cfg.Window, cfg.MaxBytes),
		id:      newID(),
		// A restore sent again comes within the window: its record
		// outlives it.
		recordTTL: 2 * cfg.Window,
		gates:     map[string]*Gate{},
		hooked:    map[*redis.Client]bool{},
		ids:       map[string]string{},
		log:       cfg.Log,
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	d := newDrops(f.log, cfg.Meter)
	f.journal.SetOnDrop(func(n int) { d.note(n, cfg.MaxBytes) })
	f.watcher = NewWatcher(f.journal, f, f.probe, f.Gate, f.Gates)
	return f
}

// newID returns a random id for this process's restore records.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Attach counts one more store sharing the machinery.
func (f *Client) Attach() {
	f.mu.Lock()
	f.stores++
	f.mu.Unlock()
}

// Detach counts one store fewer, and reports whether it was the last.
func (f *Client) Detach() (last bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stores--
	return f.stores == 0
}

// Close stops the watcher and waits for every gate's verification under
// way, at most until ctx ends; the journal is emptied and journals nothing
// more.
func (f *Client) Close(ctx context.Context) error {
	if err := f.watcher.Close(ctx); err != nil {
		return err
	}
	for _, g := range f.Gates() {
		if err := g.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Install puts node's gate before c, the client of the server (or
// Sentinel set) at node, unless it has one: a node's client made anew (a
// Cluster client drops those of nodes it no longer meets) gets the gate
// of its address.
func (f *Client) Install(c *redis.Client, node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hooked[c] {
		return
	}
	g := f.gates[node]
	if g == nil {
		g = NewGate(GateConfig{
			Node: node, Journal: f.journal, Restorer: f, Stamped: f.cfg.Stamped,
			Info: func(ctx context.Context) (ReplInfo, error) {
				inf, _, err := f.read(ctx, node, c, false)
				return inf, err
			},
			Exactness: f.cfg.Exactness, Grace: f.cfg.Window, OnCall: f.watcher.Called,
		})
		g.OnBlind = func(err error) {
			f.blind.Do(func() {
				f.log.Warn("tollgate: redis store: Redis refuses INFO to this user, so the failover journal cannot tell one primary from another and is off: grant +info (docs/reliability.md#failovers)",
					"redis.node", node, "error", err)
			})
		}
		g.OnMode = func(exact bool, inf ReplInfo) {
			if exact {
				f.log.Info("tollgate: redis store: exact failovers on this primary: its writes carry their lineage and are journaled until its replicas have them (docs/reliability.md#when-exactness-is-paid)",
					"redis.node", node, "redis.replicas", inf.Replicas, "redis.repl_offset", inf.Offset)
				return
			}
			f.log.Info("tollgate: redis store: this primary has no replica to fail over to: its writes carry no lineage and are not journaled (docs/reliability.md#when-exactness-is-paid)",
				"redis.node", node)
		}
		f.gates[node] = g
	}
	f.hooked[c] = true
	c.AddHook(g)
}

// Check is the gate's part of a new connection to node (see Gate.Check):
// inf is its server's INFO replication, ok when it was read.
func (f *Client) Check(node string, inf ReplInfo, ok bool) error {
	if g := f.Gate(node); g != nil {
		return g.Check(inf, ok)
	}
	return nil
}

// Add journals entries (each stamped with an era), unless the journal was
// closed.
func (f *Client) Add(entries ...Entry) {
	if f.watcher.Off() || len(entries) == 0 {
		return
	}
	f.journal.Add(entries...)
	f.watcher.Ensure()
}

// Gate returns node's gate, nil when it has none.
func (f *Client) Gate(node string) *Gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gates[node]
}

// Gates lists every gate.
func (f *Client) Gates() []*Gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Gate, 0, len(f.gates))
	for _, g := range f.gates {
		out = append(out, g)
	}
	return out
}

// Stats is what a client's machinery did so far, and holds now.
type Stats struct {
	Counts
	// PrimaryChanges counts the primaries met replacing another era;
	// ModeChanges the changes of exactness on one server; RestoredUnits
	// the units of the writes restored.
	PrimaryChanges, ModeChanges, RestoredUnits int64
	// Exact and NotExact count the primaries whose gates are verified,
	// exact or not.
	Exact, NotExact int
	// Journal is how many writes the journal holds, JournalBytes their
	// memory.
	Journal      int
	JournalBytes int64
}

// Stats returns what the machinery did so far.
func (f *Client) Stats() Stats {
	s := Stats{Counts: f.journal.Counts(), RestoredUnits: f.restoredUnits.Load(), Journal: f.journal.Len(), JournalBytes: f.journal.Bytes()}
	for _, g := range f.Gates() {
		s.PrimaryChanges += g.Changes()
		s.ModeChanges += g.ModeChanges()
		if _, ok := g.Era(); ok {
			if g.Exact() {
				s.Exact++
			} else {
				s.NotExact++
			}
		}
	}
	return s
}

// probe reads every primary the client counts: INFO replication and TIME,
// with its Cluster replicas on a Cluster, in one round trip each (see
// Watcher).
func (f *Client) probe(ctx context.Context) ([]Probe, error) {
	if f.cfg.Cluster == nil {
		c, ok := f.cfg.Client.(*redis.Client)
		if !ok {
			return nil, fmt.Errorf("tollgate: redis store: a failover journal on a %T", f.cfg.Client)
		}
		inf, now, err := f.read(ctx, "", c, true)
		if err != nil {
			return nil, err
		}
		return []Probe{{Node: "", Info: inf, Now: now}}, nil
	}
	var out []Probe
	var mu sync.Mutex
	err := f.cfg.Cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		inf, now, err := f.read(ctx, addr, c, true)
		if err != nil {
			return nil // a primary that does not answer says nothing; the others do
		}
		mu.Lock()
		out = append(out, Probe{Node: addr, Info: inf, Now: now})
		mu.Unlock()
		return nil
	})
	return out, err
}

// read reads the server of c, at node: its INFO replication, and on a
// Cluster node the replicas the Cluster lists for it (CLUSTER REPLICAS, a
// replica that lost its link among them), counted in Replicas; and its
// clock (µs) when clock is set. One round trip, and one more the first
// time a Cluster node is read (CLUSTER MYID).
func (f *Client) read(ctx context.Context, node string, c *redis.Client, clock bool) (ReplInfo, int64, error) {
	f.mu.Lock()
	id := f.ids[node]
	f.mu.Unlock()
	if f.cfg.Cluster != nil && id == "" {
		var err error
		if id, err = c.ClusterMyID(ctx).Result(); err != nil {
			return ReplInfo{}, 0, err
		}
		f.mu.Lock()
		f.ids[node] = id
		f.mu.Unlock()
	}
	if !clock && id == "" {
		// A gate's read alone, as a command of its own: read in a
		// pipeline, a DNS failover's test (TestFailoverDemotedPrimary
		// LeftAtOnce) saw the gate's reads meet the demoted primary's open
		// connection again and again, its calls never served.
		s, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return ReplInfo{}, 0, err
		}
		return ParseReplication(s), 0, nil
	}
	pipe := c.Pipeline()
	info := pipe.Info(ctx, "replication")
	var now *redis.TimeCmd
	if clock {
		now = pipe.Time(ctx)
	}
	var replicas *redis.Cmd
	if id != "" {
		replicas = pipe.Do(ctx, "cluster", "replicas", id)
	}
	_, _ = pipe.Exec(ctx)
	if err := info.Err(); err != nil {
		return ReplInfo{}, 0, err
	}
	inf := ParseReplication(info.Val())
	if replicas != nil {
		if err := replicas.Err(); err != nil && strings.Contains(err.Error(), "nknown node") {
			// Another node at the address: its id is read again next time.
			f.mu.Lock()
			delete(f.ids, node)
			f.mu.Unlock()
		} else if listed, err := replicas.StringSlice(); err == nil {
			inf.Replicas = max(inf.Replicas, len(listed))
		}
	}
	var us int64
	if now != nil {
		if err := now.Err(); err != nil {
			return ReplInfo{}, 0, err
		}
		us = now.Val().UnixMicro()
	}
	return inf, us, nil
}

// NotRun reports whether err says a script call was not run, so that it
// can be sent again: its server is no longer a primary (READONLY: no write
// succeeds on a replica, and the batch script fails as a whole on its
// first), or a gate stopped it before it was written.
func NotRun(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "READONLY") ||
		errors.Is(err, ErrServerChanged) || errors.Is(err, ErrNotPrimary))
}

// drops reports the writes the journal drops for its memory cap: each in
// the telemetry.MetricJournalDropped counter, and in a warning at most
// once a second, with how many since the last.
type drops struct {
	log     *slog.Logger
	counter metric.Int64Counter

	mu      sync.Mutex
	last    time.Time
	pending int
}

func newDrops(log *slog.Logger, mp metric.MeterProvider) *drops {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, _ := mp.Meter("github.com/tollgate/tollgate/store").Int64Counter(telemetry.MetricJournalDropped,
		metric.WithUnit("{write}"),
		metric.WithDescription("Writes the failover journal dropped for its memory cap: each is forgotten if its primary is lost before a replica received it"))
	return &drops{log: log, counter: c}
}

// note reports n writes dropped by a journal holding maxBytes.
func (d *drops) note(n int, maxBytes int64) {
	if d.counter != nil {
		d.counter.Add(context.Background(), int64(n))
	}
	d.mu.Lock()
	d.pending += n
	now := time.Now()
	if now.Sub(d.last) < time.Second {
		d.mu.Unlock()
		return
	}
	pending := d.pending
	d.last, d.pending = now, 0
	d.mu.Unlock()
	d.log.Warn("tollgate: redis store: the failover journal is full: writes no replica has acknowledged are dropped, and forgotten if their primary is lost (a replica stopped or far behind? docs/reliability.md#failovers)",
		"dropped", pending, "journal.bytes", maxBytes)
}
