package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
)

// Each script is prelude.lua (arguments, clock, the read and the
// request-id replay), arith.lua (exact integer helpers), one algorithm file
// (an inline block deciding cost c) and main.lua (the writes and the reply):
// the replay handling is written once for all four.
var (
	//go:embed prelude.lua
	prelude string
	//go:embed arith.lua
	arith string
	//go:embed main.lua
	mainPart string
	//go:embed token_bucket.lua
	tokenBucket string
	//go:embed gcra.lua
	gcra string
	//go:embed sliding_window.lua
	slidingWindow string
	//go:embed fixed_window.lua
	fixedWindow string
)

var sources = [...]string{
	tollgate.TokenBucket:   prelude + arith + tokenBucket + mainPart,
	tollgate.GCRA:          prelude + arith + gcra + mainPart,
	tollgate.SlidingWindow: prelude + arith + slidingWindow + mainPart,
	tollgate.FixedWindow:   prelude + arith + fixedWindow + mainPart,
}

// The scripts, one per algorithm. Run them with Script.Run, which sends
// EVALSHA and falls back to EVAL once when the server answers NOSCRIPT.
var (
	// TokenBucket decides for tollgate.TokenBucket.
	TokenBucket = redis.NewScript(sources[tollgate.TokenBucket])
	// GCRA decides for tollgate.GCRA.
	GCRA = redis.NewScript(sources[tollgate.GCRA])
	// SlidingWindow decides for tollgate.SlidingWindow.
	SlidingWindow = redis.NewScript(sources[tollgate.SlidingWindow])
	// FixedWindow decides for tollgate.FixedWindow.
	FixedWindow = redis.NewScript(sources[tollgate.FixedWindow])
)

// ForAlgorithm returns the script that decides for a, or nil for an unknown
// algorithm (which tollgate.Limit.Validate rejects).
func ForAlgorithm(a tollgate.Algorithm) *redis.Script {
	switch a {
	case tollgate.TokenBucket:
		return TokenBucket
	case tollgate.GCRA:
		return GCRA
	case tollgate.SlidingWindow:
		return SlidingWindow
	case tollgate.FixedWindow:
		return FixedWindow
	}
	return nil
}

// Source returns the full text of the script for a, as sent with EVAL (for
// SCRIPT LOAD on a pipelined path, or to inspect it), or "" for an unknown
// algorithm.
func Source(a tollgate.Algorithm) string {
	if int(a) >= len(sources) {
		return ""
	}
	return sources[a]
}
