package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
)

// The decide script is prelude.lua (arguments, clock, one read of every
// key, the request-id check), group.lua (the loop over the groups and the
// locals a block reads), arith.lua (the group's exact arithmetic and
// calendar helpers), the four algorithm blocks, each an inline chunk chosen
// by the group's algorithm, and main.lua (the reply and, when every group
// admits, the writes). The refund script is refund.lua, arith.lua,
// refund_forfeit.lua, the four refund blocks and refund_end.lua.
var (
	//go:embed prelude.lua
	prelude string
	//go:embed group.lua
	group string
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

	//go:embed batch.lua
	batch string
	//go:embed batch_end.lua
	batchEnd string

	//go:embed refund.lua
	refund string
	//go:embed refund_forfeit.lua
	refundForfeit string
	//go:embed refund_token_bucket.lua
	refundTokenBucket string
	//go:embed refund_gcra.lua
	refundGCRA string
	//go:embed refund_sliding_window.lua
	refundSlidingWindow string
	//go:embed refund_fixed_window.lua
	refundFixedWindow string
	//go:embed refund_end.lua
	refundEnd string
)

// byAlgorithm chooses one block per tollgate.Algorithm value (0 to 3) by
// the local alg.
func byAlgorithm(blocks ...string) string {
	s := ""
	for i, b := range blocks {
		if i > 0 {
			s += "else"
		}
		s += fmt.Sprintf("if alg == %d then\n%s", i, b)
	}
	return s + "end\n"
}

// Script names one of tollgate's scripts.
type Script uint8

const (
	// Decide judges one or more (key, limit, cost) groups and debits them
	// all when every one admits; it also peeks (judges without writing).
	Decide Script = iota
	// Refund gives back the debits of a Decide call, at most once per
	// nonce.
	Refund
	// Batch judges many independent decisions in one call, each on its
	// own, in order, as one Decide call each would.
	Batch
)

var sources = [...]string{
	Decide: prelude + group + arith + byAlgorithm(tokenBucket, gcra, slidingWindow, fixedWindow) + mainPart,
	Refund: refund + arith + refundForfeit + byAlgorithm(refundTokenBucket, refundGCRA, refundSlidingWindow, refundFixedWindow) + refundEnd,
	Batch:  batch + arith + byAlgorithm(tokenBucket, gcra, slidingWindow, fixedWindow) + batchEnd,
}

var hashes = func() (h [len(sources)]string) {
	for i, s := range sources {
		sum := sha1.Sum([]byte(s))
		h[i] = hex.EncodeToString(sum[:])
	}
	return h
}()

// String returns the script's name: "decide", "refund" or "batch".
func (s Script) String() string {
	switch s {
	case Decide:
		return "decide"
	case Refund:
		return "refund"
	case Batch:
		return "batch"
	}
	return fmt.Sprintf("script(%d)", uint8(s))
}

// Source returns the full text of s as sent with EVAL or SCRIPT LOAD, or ""
// for an unknown script.
func Source(s Script) string {
	if int(s) >= len(sources) {
		return ""
	}
	return sources[s]
}

// Hash returns the SHA-1 of s's source in lower-case hex, the name EVALSHA
// calls it by, or "" for an unknown script.
func Hash(s Script) string {
	if int(s) >= len(hashes) {
		return ""
	}
	return hashes[s]
}
