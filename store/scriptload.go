package store

import (
	"context"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/lua"
)

// clientHooks is what the Redis stores of one go-redis client add to it,
// once per client however many stores share it: an OnConnect that loads
// every script on each new connection's server before the connection is
// used, so that a server the client has just switched to (a promoted
// replica, a restarted node) never answers EVALSHA with NOSCRIPT; a hook
// that counts the NOSCRIPT replies the client still gets; and a signal
// stores wait on to check, at once, whether their primary changed.
type clientHooks struct {
	noScript atomic.Int64

	mu       sync.Mutex
	connects chan struct{} // closed and replaced at each new connection
	// connectInfo is INFO replication read on the latest new connection
	// of a *redis.Client (whose connections all go to one server), and
	// connectCount counts them: a connection to a new primary shows it at
	// once, where a read through the pool may still get an old one.
	connectInfo  replInfo
	connectCount uint64
}

// hooked holds each client's hooks, by a weak pointer to the client, so that
// a client dropped by its owner is not kept alive by its entry.
var hooked sync.Map // weak.Pointer[client type] → *clientHooks

// hooksFor returns c's hooks, installing them on first use. The OnConnect
// is set in c's options (chained after the one already there), which
// go-redis reads at each dial: NewRedis must run before c is used from
// other goroutines, as client options are set before use. A client of a
// type this package does not know (a Ring) gets the NOSCRIPT count only.
func hooksFor(c redis.UniversalClient) *clientHooks {
	var key any
	switch c := c.(type) {
	case *redis.Client:
		key = weak.Make(c)
	case *redis.ClusterClient:
		key = weak.Make(c)
	case *redis.Ring:
		key = weak.Make(c)
	default:
		return &clientHooks{connects: make(chan struct{})}
	}
	h := &clientHooks{connects: make(chan struct{})}
	got, loaded := hooked.LoadOrStore(key, h)
	if loaded {
		return got.(*clientHooks)
	}
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		o.OnConnect = h.onConnect(o.OnConnect, true)
	case *redis.ClusterClient:
		// Copied into each node's options when the node is first seen,
		// as a promoted replica is after a failover.
		o := c.Options()
		o.OnConnect = h.onConnect(o.OnConnect, false)
	}
	c.AddHook(noScriptCounter{&h.noScript})
	return h
}

// onConnect returns an OnConnect that runs next (the client's own, if any),
// then loads the scripts and signals the new connection. It never fails a
// connection for its own sake: a server that refuses SCRIPT (an ACL) still
// gets each script with EVAL on its first NOSCRIPT.
func (h *clientHooks) onConnect(next func(context.Context, *redis.Conn) error, replication bool) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		inf, ok := loadScripts(ctx, cn, replication)
		h.signal(inf, ok)
		return nil
	}
}

// signal wakes everyone waiting on the current connects channel, after
// recording inf when ok.
func (h *clientHooks) signal(inf replInfo, ok bool) {
	h.mu.Lock()
	if ok {
		h.connectInfo = inf
		h.connectCount++
	}
	close(h.connects)
	h.connects = make(chan struct{})
	h.mu.Unlock()
}

// lastConnect returns the replication read on the latest new connection
// and how many were read so far.
func (h *clientHooks) lastConnect() (replInfo, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connectInfo, h.connectCount
}

// connected returns a channel closed at the next new connection.
func (h *clientHooks) connected() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connects
}

// allScripts are the scripts the store calls, loaded at connect: every
// script package lua has.
var allScripts = func() (all []lua.Script) {
	for s := lua.Script(0); lua.Source(s) != ""; s++ {
		all = append(all, s)
	}
	return all
}()

// loadScripts makes sure cn's server has every script: one SCRIPT EXISTS,
// then a SCRIPT LOAD of each one missing (none on a server that already
// ran them, one round trip more on a server that never did). With
// replication it also reads INFO replication, in the same round trip, and
// returns it (ok when read).
func loadScripts(ctx context.Context, cn *redis.Conn, replication bool) (inf replInfo, ok bool) {
	shas := make([]string, len(allScripts))
	for i, s := range allScripts {
		shas[i] = lua.Hash(s)
	}
	pipe := cn.Pipeline()
	exists := pipe.ScriptExists(ctx, shas...)
	var info *redis.StringCmd
	if replication {
		info = pipe.Info(ctx, "replication")
	}
	_, _ = pipe.Exec(ctx)
	if info != nil && info.Err() == nil {
		inf, ok = parseReplication(info.Val()), true
	}
	have, err := exists.Result()
	if err != nil || len(have) != len(shas) {
		return inf, ok
	}
	pipe = cn.Pipeline()
	for i, ok := range have {
		if !ok {
			pipe.ScriptLoad(ctx, lua.Source(allScripts[i]))
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
