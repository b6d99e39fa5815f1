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
		o.OnConnect = h.onConnect(o.OnConnect)
	case *redis.ClusterClient:
		// Copied into each node's options when the node is first seen,
		// as a promoted replica is after a failover.
		o := c.Options()
		o.OnConnect = h.onConnect(o.OnConnect)
	}
	c.AddHook(noScriptCounter{&h.noScript})
	return h
}

// onConnect returns an OnConnect that runs next (the client's own, if any),
// then loads the scripts and signals the new connection. It never fails a
// connection for its own sake: a server that refuses SCRIPT (an ACL) still
// gets each script with EVAL on its first NOSCRIPT.
func (h *clientHooks) onConnect(next func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		loadScripts(ctx, cn)
		h.signal()
		return nil
	}
}

// signal wakes everyone waiting on the current connects channel.
func (h *clientHooks) signal() {
	h.mu.Lock()
	close(h.connects)
	h.connects = make(chan struct{})
	h.mu.Unlock()
}

// connected returns a channel closed at the next new connection.
func (h *clientHooks) connected() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connects
}

// allScripts are the scripts the store calls, loaded at connect.
var allScripts = [...]lua.Script{lua.Decide, lua.Batch, lua.Settle, lua.Refund, lua.Slot}

// loadScripts makes sure cn's server has every script: one SCRIPT EXISTS,
// then a SCRIPT LOAD of each one missing (none on a server that already
// ran them, one round trip more on a server that never did).
func loadScripts(ctx context.Context, cn *redis.Conn) {
	shas := make([]string, len(allScripts))
	for i, s := range allScripts {
		shas[i] = lua.Hash(s)
	}
	have, err := cn.ScriptExists(ctx, shas...).Result()
	if err != nil || len(have) != len(shas) {
		return
	}
	pipe := cn.Pipeline()
	for i, ok := range have {
		if !ok {
			pipe.ScriptLoad(ctx, lua.Source(allScripts[i]))
		}
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx)
	}
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
