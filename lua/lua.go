package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"
)

//go:embed *.lua
var files embed.FS

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
	// Settle makes the final cost of admitted requests what their calls
	// cost, giving the difference back or debiting it past empty; or
	// debits requests whether or not they fit (overdraw).
	Settle
	// Slot acquires, renews, releases and counts the in-flight slots of an
	// identity.
	Slot
	// Reset forgets one state key: a full bucket or an empty window again.
	Reset
	// Admit takes an in-flight slot and makes a Decide call's decision in
	// one call, all or nothing.
	Admit
	// Finish settles calls and then releases their in-flight slots in one
	// call.
	Finish
	// Share records one member's demand on a shared limit and grants it
	// its max-min fair share.
	Share
)

// drivers names each script's driver: the file that reads its arguments,
// the clock and its keys, loops over its decisions, writes and replies.
var drivers = [...]string{Decide: "decide.lua", Refund: "refund.lua", Batch: "batch.lua", Settle: "settle.lua", Slot: "slot.lua", Reset: "reset.lua", Admit: "admit.lua", Finish: "finish.lua", Share: "share.lua"}

// Every *.lua file is a complete chunk: it compiles alone. A script is its
// driver with each line "--#name" replaced by the part of that name:
//
//	--#arith      arith.lua: the exact products and the calendar, defined
//	              only for a limit that needs them
//	--#judge      the algorithm blocks, one per tollgate.Algorithm, chosen
//	              by the local alg: token_bucket.lua, gcra.lua,
//	              sliding_window.lua, fixed_window.lua
//	--#give_back  the refund blocks, likewise: refund_<algorithm>.lua
//	--#settle     the settle blocks, likewise: settle_<algorithm>.lua
//	--#debt       the debt blocks, likewise: debt_<algorithm>.lua
//	--#decide_script  the whole decide script as assembled, and
//	--#settle_script  the settle script likewise (drivers that come
//	              after theirs only)
//
// A judge block reads state (the key's string, or false when absent), now,
// rate, period, capacity and c (the cost, 0 to only read), and sets
// allowed, remaining, retry and reset (µs); when it admits c > 0, also
// new_state and keep (µs from now that the state matters). new_state is
// formatted with %d, as plain decimal integers: Lua's tostring writes a µs
// timestamp as 1.8e+15. A give-back block reads state (a string), c,
// forfeit, debited_at, now and the limit, and sets new_state (nil to leave
// the key, false to delete it). A settle block reads state, now, delta
// (units to debit past empty, or, below 0, to give back), debited_at,
// adm_reset and the limit, and sets new_state likewise. A debt block reads
// state, now and the limit, with arith.lua's functions all defined, and
// sets debt, the units owed past empty. A new script reuses a part by
// naming it on a line of its driver.
//
// The blocks are inline code, not functions: a function costs a closure
// per script call and a call per decision, which made a decide call 5 to
// 15% dearer in Redis time, whether as one local function per block or as
// one that dispatches by algorithm (BenchmarkScriptServerCost).
func assemble(fsys fs.FS) (sources [len(drivers)]string, err error) {
	read := func(name string) string {
		b, e := fs.ReadFile(fsys, name)
		if e != nil && err == nil {
			err = e
		}
		return string(b)
	}
	byAlgorithm := func(blocks ...string) string {
		s := ""
		for i, b := range blocks {
			if i > 0 {
				s += "else"
			}
			s += fmt.Sprintf("if alg == %d then\n%s", i, read(b))
		}
		return s + "end\n"
	}
	parts := map[string]string{
		"arith":     read("arith.lua"),
		"judge":     byAlgorithm("token_bucket.lua", "gcra.lua", "sliding_window.lua", "fixed_window.lua"),
		"give_back": byAlgorithm("refund_token_bucket.lua", "refund_gcra.lua", "refund_sliding_window.lua", "refund_fixed_window.lua"),
		"settle":    byAlgorithm("settle_token_bucket.lua", "settle_gcra.lua", "settle_sliding_window.lua", "settle_fixed_window.lua"),
		"debt":      byAlgorithm("debt_token_bucket.lua", "debt_gcra.lua", "debt_sliding_window.lua", "debt_fixed_window.lua"),
	}
	for s, driver := range drivers {
		var b strings.Builder
		for line := range strings.Lines(read(driver)) {
			name, ok := strings.CutPrefix(strings.TrimSpace(line), "--#")
			if !ok {
				b.WriteString(line)
				continue
			}
			part, ok := parts[name]
			if !ok && err == nil {
				err = fmt.Errorf("lua: %s names no part %q", driver, name)
			}
			b.WriteString(part)
		}
		sources[s] = b.String()
		switch Script(s) {
		case Decide:
			parts["decide_script"] = sources[s]
		case Settle:
			parts["settle_script"] = sources[s]
		}
	}
	return sources, err
}

var sources = func() [len(drivers)]string {
	s, err := assemble(files)
	if err != nil {
		panic(err)
	}
	return s
}()

var hashes = func() (h [len(sources)]string) {
	for i, s := range sources {
		sum := sha1.Sum([]byte(s))
		h[i] = hex.EncodeToString(sum[:])
	}
	return h
}()

// String returns the script's name: "decide", "refund", "batch", "settle",
// "slot", "reset", "admit", "finish" or "share".
func (s Script) String() string {
	switch s {
	case Decide:
		return "decide"
	case Refund:
		return "refund"
	case Batch:
		return "batch"
	case Settle:
		return "settle"
	case Slot:
		return "slot"
	case Reset:
		return "reset"
	case Admit:
		return "admit"
	case Finish:
		return "finish"
	case Share:
		return "share"
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
