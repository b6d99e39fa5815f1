package store

import (
	"context"
)

// The send path. Every script call the store makes (decide, batch,
// settle, a refund's settle, seat, reset, admit, finish, share) reaches
// Redis through roundTrip, and every caller that waits for one does so
// through exchange or the batcher (send), which both leave at the caller's
// deadline whatever the go-redis client's options. A script call is never
// re-sent by go-redis (scriptCmd), is sent again as EVAL once when the
// server answers NOSCRIPT, and its reply is read by the decoder declared
// beside its script (call.read, shared.read, readSettle, fold.read,
// readReset, readShare).

// exchange sends calls under ctx, as one command alone or one pipeline,
// and returns once every call's cmd holds its reply (nil), or once ctx
// ends (ctx's error). A client that honours deadlines
// (ContextTimeoutEnabled) sends them in the caller's goroutine; with any
// other client, which would wait for its ReadTimeout (5s by default) times
// its retries whatever ctx says, they go in a goroutine of their own that
// the caller leaves at its deadline: the calls are then abandoned (their
// replies must not be read) and the goroutine ends when the client gives
// up or Redis answers.
func (r *Redis) exchange(ctx context.Context, calls []scriptCall) error {
	if r.deadlineSafe {
		r.roundTrip(ctx, calls)
		return nil
	}
	done := make(chan struct{})
	go func() {
		r.roundTrip(ctx, calls)
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-done: // answered while the caller was leaving
		return nil
	default:
		r.refreshRouting(ctx.Err())
		return ctx.Err()
	}
}

// roundTrip is the one function that sends script calls to Redis: calls
// under ctx, a single call alone and several as one pipeline, then the
// calls answered NOSCRIPT again as EVAL (one more round trip, which loads
// each script on exactly the nodes that lacked it). Every call's cmd holds
// its reply. A reply lost on the way (no answer from the node) refreshes a
// Cluster client's slot map (refreshRouting).
func (r *Redis) roundTrip(ctx context.Context, calls []scriptCall) {
	if len(calls) == 1 {
		c := &calls[0]
		c.cmd = c.script.command(ctx, c.args, false)
		if err := r.client.Process(ctx, c.cmd); isNoScript(err) {
			c.cmd = c.script.command(ctx, c.args, true)
			_ = r.client.Process(ctx, c.cmd)
		}
		r.refreshRouting(c.cmd.Err())
		return
	}
	pipe := r.client.Pipeline()
	for i := range calls {
		calls[i].cmd = calls[i].script.command(ctx, calls[i].args, false)
		_ = pipe.Process(ctx, calls[i].cmd)
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	var again []int
	for i := range calls {
		if isNoScript(calls[i].cmd.Err()) {
			again = append(again, i)
		}
	}
	if again != nil {
		pipe = r.client.Pipeline()
		for _, i := range again {
			calls[i].cmd = calls[i].script.command(ctx, calls[i].args, true)
			_ = pipe.Process(ctx, calls[i].cmd)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil {
			r.refreshRouting(err)
			break
		}
	}
}
