package store

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/lua"
	"github.com/tollgate/tollgate/store/internal/failover"
)

// clientHooks is what the Redis stores of one go-redis client add to it,
// once per client however many stores share it: an OnConnect that loads
// every script on each new connection's server before the connection is
// used, so that a server the client has just switched to (a promoted
// replica, a restarted node) never answers EVALSHA with NOSCRIPT; a hook
// that counts the NOSCRIPT replies the client still gets; and, once a
// store with a failover journal is made on the client, its failover
// machinery: a gate on the client (each node's client, on a Cluster
// client), whose part of OnConnect checks each new connection's server.
type clientHooks struct {
	noScript atomic.Int64
	client   redis.UniversalClient

	mu sync.Mutex
	fo *failover.Client
	// nodes are a Cluster client's nodes met so far, by address.
	nodes map[string]*redis.Client
}

// hooked holds each client's hooks, both by weak pointers, so that neither
// keeps the client alive; a client's entry goes once the client is
// collected.
var hooked sync.Map // weak.Pointer[client type] → weak.Pointer[clientHooks]

// hooksFor returns c's hooks, installing them on first use. The OnConnect
// is set in c's options (chained after the one already there), which
// go-redis reads at each dial: NewRedis must run before c is used from
// other goroutines, as client options are set before use. A client of a
// type this package does not know (a Ring) gets the NOSCRIPT count only.
func hooksFor(c redis.UniversalClient) *clientHooks {
	switch c := c.(type) {
	case *redis.Client:
		return hooksOf(c, c)
	case *redis.ClusterClient:
		return hooksOf(c, c)
	case *redis.Ring:
		return hooksOf(c, c)
	}
	return &clientHooks{client: c}
}

// hooksOf returns the hooks of c (the client u), installing them on first
// use; c's entry in hooked goes once c is collected.
func hooksOf[T any](c *T, u redis.UniversalClient) *clientHooks {
	key := weak.Make(c)
	h := &clientHooks{client: u}
	got, loaded := hooked.LoadOrStore(key, weak.Make(h))
	if loaded {
		if old := got.(weak.Pointer[clientHooks]).Value(); old != nil {
			return old
		}
		// Not reached: the client holds its hooks (its options and hook
		// list refer to them) for as long as it lives.
		hooked.Store(key, weak.Make(h))
	} else {
		runtime.AddCleanup(c, func(k weak.Pointer[T]) { hooked.Delete(k) }, key)
	}
	h.install()
	return h
}

// install chains the OnConnect into the client's options (each node's,
// on a Cluster client) and adds the NOSCRIPT count.
func (h *clientHooks) install() {
	switch c := h.client.(type) {
	case *redis.Client:
		o := c.Options()
		o.OnConnect = h.onConnect(o.OnConnect, "")
	case *redis.ClusterClient:
		// Each node's client when the Cluster client first meets the node,
		// as a promoted replica is met after a failover; and the nodes met
		// already, when the client was used before (its state is loaded
		// then, and this reads no server).
		c.OnNewNode(h.installNode)
		if c.PoolStats().TotalConns > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), failover.ProbeTimeout)
			_ = c.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
				h.installNode(n)
				return nil
			})
			cancel()
		}
	}
	h.client.AddHook(noScriptCounter{&h.noScript})
}

// installNode chains the OnConnect into the options of n, a Cluster node's
// client, and puts the failover gate before it once the client has one.
func (h *clientHooks) installNode(n *redis.Client) {
	o := n.Options()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nodes == nil {
		h.nodes = map[string]*redis.Client{}
	}
	if h.nodes[o.Addr] == n {
		return
	}
	h.nodes[o.Addr] = n
	o.OnConnect = h.onConnect(o.OnConnect, o.Addr)
	if h.fo != nil {
		h.fo.Install(n, o.Addr)
	}
}

// onConnect returns an OnConnect that runs next (the client's own, if any),
// then loads the scripts, reading INFO replication in the same round trip,
// and has node's gate (once the client has failover machinery) check the
// new connection's server. It fails a connection only for the gate's sake:
// a server that refuses SCRIPT (an ACL) still gets each script with EVAL
// on its first NOSCRIPT.
func (h *clientHooks) onConnect(next func(context.Context, *redis.Conn) error, node string) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		inf, ok := loadScripts(ctx, cn)
		h.mu.Lock()
		fo := h.fo
		h.mu.Unlock()
		if fo == nil {
			return nil
		}
		return fo.Check(node, inf, ok)
	}
}

// failoverFor returns the client's failover machinery, made by the first
// store that keeps a journal (with its configuration), and counts r among
// the stores sharing it.
func (h *clientHooks) failoverFor(r *Redis) *failover.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fo == nil {
		f := failover.New(r.failoverConfig())
		switch c := r.client.(type) {
		case *redis.Client:
			f.Install(c, "")
		case *redis.ClusterClient:
			for addr, n := range h.nodes {
				f.Install(n, addr)
			}
		}
		h.fo = f
	}
	h.fo.Attach()
	return h.fo
}

// allScripts are the scripts the store calls, loaded at connect: every
// script package lua has.
var allScripts = func() (all []lua.Script) {
	for s := lua.Script(0); s.Source() != ""; s++ {
		all = append(all, s)
	}
	return all
}()

// loadScripts makes sure cn's server has every script: one SCRIPT EXISTS,
// then a SCRIPT LOAD of each one missing (none on a server that already
// ran them, one round trip more on a server that never did). It also reads
// INFO replication, in the same round trip, and returns it (ok when read).
func loadScripts(ctx context.Context, cn *redis.Conn) (inf failover.ReplInfo, ok bool) {
	shas := make([]string, len(allScripts))
	for i, s := range allScripts {
		shas[i] = s.Hash()
	}
	pipe := cn.Pipeline()
	exists := pipe.ScriptExists(ctx, shas...)
	info := pipe.Info(ctx, "replication")
	_, _ = pipe.Exec(ctx)
	if info.Err() == nil {
		inf, ok = failover.ParseReplication(info.Val()), true
	}
	have, err := exists.Result()
	if err != nil || len(have) != len(shas) {
		return inf, ok
	}
	pipe = cn.Pipeline()
	for i, ok := range have {
		if !ok {
			pipe.ScriptLoad(ctx, allScripts[i].Source())
		}
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx)
	}
	return inf, ok
}

// noScriptCounter is a go-redis hook counting NOSCRIPT replies, alone or in
// pipelines, on every server of a client.
type noScriptCounter struct{ n *atomic.Int64 }

func (noScriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h noScriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isNoScript(err) || isNoScript(cmd.Err()) {
			h.n.Add(1)
		}
		return err
	}
}

func (h noScriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if isNoScript(cmd.Err()) {
				h.n.Add(1)
			}
		}
		return err
	}
}
