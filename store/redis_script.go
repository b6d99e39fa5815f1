package store

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/lua"
)

// script is one of package lua's scripts as the store calls it. A call's
// arguments are EVALSHA sha numkeys KEYS... ARGV...; its first two places
// are filled in when it is sent.
type script struct {
	sha, src any // EVALSHA's and EVAL's second argument, boxed once
	// newCmd returns the command carrying a call's arguments: it reads the
	// script's reply, and says whether go-redis may re-send it.
	newCmd func(ctx context.Context, args ...any) redis.Cmder
	// stamped: the script writes states with their lineage, and its
	// ARGV[1] is the era the call is stamped with (lua/lineage_read.lua),
	// which the failover gate fills in as the call leaves for a primary.
	stamped bool
}

// The scripts the store calls (lua/doc.go has what each takes and answers).
var (
	decideScript = newScript(lua.Decide, sentOnce)
	batchScript  = newScript(lua.Batch, sentOnce)
)

// newScript returns s as the store calls it; every script that writes a
// state or a seat (decide, batch, settle, admit, finish, seat, restore) is
// stamped.
func newScript(s lua.Script, newCmd func(context.Context, ...any) redis.Cmder) *script {
	sc := &script{sha: s.Hash(), src: s.Source(), newCmd: newCmd}
	switch s {
	case lua.Decide, lua.Batch, lua.Settle, lua.Admit, lua.Finish, lua.Seat, lua.Restore:
		sc.stamped = true
		stampedScripts = append(stampedScripts, sc)
	}
	return sc
}

// stampedScripts are the scripts whose calls carry an era.
var stampedScripts []*script

// eraNone is the era a stamped call carries until the failover gate stamps
// it, and when the store keeps no journal: none, so the scripts write no
// lineage.
var eraNone any = ""

// eraAt returns where the era of a call of a stamped script sits in its
// arguments (ARGV[1], after numkeys KEYS), and whether args are a call of
// a stamped script at all.
func eraAt(args []any) (int, bool) {
	if len(args) < 3 {
		return 0, false
	}
	stamped := false
	for _, s := range stampedScripts {
		if args[1] == s.sha || args[1] == s.src {
			stamped = true
			break
		}
	}
	if !stamped {
		return 0, false
	}
	var n int
	switch k := args[2].(type) {
	case int:
		n = k
	case int64:
		n = int(k)
	default:
		return 0, false
	}
	if i := 3 + n; i < len(args) {
		return i, true
	}
	return 0, false
}

// eraOf returns the era a sent call of a stamped script carried: "" when it
// was not stamped.
func eraOf(args []any) string {
	if i, ok := eraAt(args); ok {
		if e, ok := args[i].(string); ok {
			return e
		}
	}
	return ""
}

// Script-call arguments that never change, boxed once: converting a string
// to an interface value allocates.
var (
	evalshaArg any = "evalsha"
	evalArg    any = "eval"
)

// scriptCmd is a script call that go-redis must send at most once. go-redis
// re-sends a command whose reply did not arrive (a read timeout, a
// connection closed under it: MaxRetries, and a ClusterClient's
// MaxRedirects), and Redis may have run the first copy, so a re-sent
// decision could be debited twice. A command whose NoRetry is true is never
// re-sent once written, alone or in a pipeline, by any go-redis client;
// redirects (MOVED, ASK), which mean it did not run, are still followed.
type scriptCmd struct{ *redis.IntSliceCmd }

// NoRetry reports that the command must not be re-sent.
func (scriptCmd) NoRetry() bool { return true }

// sentOnce is the command of a script answering integers that must run at
// most once per call: a scriptCmd.
func sentOnce(ctx context.Context, args ...any) redis.Cmder {
	return scriptCmd{redis.NewIntSliceCmd(ctx, args...)}
}

// command returns a call of s on args as EVALSHA, or as EVAL with the
// script's source (which also loads it on the node that runs it) when eval
// is set.
func (s *script) command(ctx context.Context, args []any, eval bool) redis.Cmder {
	if eval {
		args[0], args[1] = evalArg, s.src
	} else {
		args[0], args[1] = evalshaArg, s.sha
	}
	if s.stamped {
		if i, ok := eraAt(args); ok {
			args[i] = eraNone // until the gate stamps this send
		}
	}
	cmd := s.newCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // KEYS[1]: the Cluster slot, without parsing numkeys
	return cmd
}

// isNoScript reports a reply saying the server does not have the script:
// after a restart, a failover, SCRIPT FLUSH, or on a Cluster node that never
// ran it.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// scriptCall is one script call on its way to Redis (see exchange): the
// script, its arguments, and once sent, the command holding the reply,
// which the script's decoder reads.
type scriptCall struct {
	script *script
	args   []any
	cmd    redis.Cmder
}
