package store

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
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
func (r *road) exchange(ctx context.Context, calls []scriptCall) error {
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

// sender is the client a store sends its script calls through: the send
// path's one place (roundTrip).
type sender struct {
	client redis.UniversalClient
	// cluster is client when it is a *redis.ClusterClient, else nil.
	cluster *redis.ClusterClient
}

// roundTrip is the one function that sends script calls to Redis: calls
// under ctx, a single call alone and several as one pipeline, then the
// calls answered NOSCRIPT again as EVAL (one more round trip, which loads
// each script on exactly the nodes that lacked it), then, up to
// maxNotRunRetries times, the calls that were not run (a demoted
// primary's READONLY, a call the failover gate stopped before it was
// written): they are sent again to the server now serving their keys.
// Every call's cmd holds its reply. A reply lost on the way (no answer
// from the node) refreshes a Cluster client's slot map (refreshRouting).
func (s sender) roundTrip(ctx context.Context, calls []scriptCall) {
	s.send(ctx, calls, false)
	for i := range calls {
		if isNoScript(calls[i].cmd.Err()) {
			s.send(ctx, calls[i:i+1], true)
		}
	}
	for range maxNotRunRetries {
		var again []scriptCall
		var at []int
		for i := range calls {
			if notRun(calls[i].cmd.Err()) {
				again, at = append(again, calls[i]), append(at, i)
			}
		}
		if again == nil || ctx.Err() != nil {
			break
		}
		s.send(ctx, again, false)
		for k, i := range at {
			if isNoScript(again[k].cmd.Err()) {
				s.send(ctx, again[k:k+1], true)
			}
			calls[i] = again[k]
		}
	}
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil {
			s.refreshRouting(err)
			break
		}
	}
}

// send sends calls once, as EVALSHA, or as EVAL with eval: alone or as
// one pipeline.
func (s sender) send(ctx context.Context, calls []scriptCall, eval bool) {
	if len(calls) == 1 {
		c := &calls[0]
		c.cmd = c.script.command(ctx, c.args, eval)
		_ = s.client.Process(ctx, c.cmd)
		return
	}
	pipe := s.client.Pipeline()
	for i := range calls {
		calls[i].cmd = calls[i].script.command(ctx, calls[i].args, eval)
		_ = pipe.Process(ctx, calls[i].cmd)
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
}

// refreshRouting asks a Cluster client to reload its slot map after a
// call failed without a reply from Redis (a refused connection, a
// timeout) or was not run (a demoted primary, a changed server). go-redis
// reloads the map by itself only when a node answers MOVED, ASK or
// READONLY, or every ClusterStateReloadInterval (60s by default): after a
// primary dies it keeps sending that primary's slots to the dead address,
// which never answers MOVED, long after a replica has been promoted. The
// reload runs in the background, at most one at a time and one every 200ms
// (go-redis coalesces them).
func (s sender) refreshRouting(err error) {
	if err == nil || s.cluster == nil || errors.Is(err, context.Canceled) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) && !notRun(err) {
		return // the node answered: it is there
	}
	s.cluster.ReloadState(context.Background())
}
