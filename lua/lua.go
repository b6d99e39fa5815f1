package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
)

//go:generate go test -count=1 -run ^TestGenerated$ . -update

// generated holds the scripts as assembled (see assemble), one file each.
//
//go:embed gen/*.lua
var generated embed.FS

// Script names one of tollgate's scripts.
type Script uint8

const (
	// Decide judges one or more (key, limit, cost) entries and debits them
	// all when every one admits; it also peeks (judges without writing).
	Decide Script = iota
	// Batch judges many independent decisions in one call, each on its
	// own, in order, as one Decide call each would.
	Batch
	// Settle makes the final cost of admitted requests what their calls
	// cost, giving the difference back or debiting it past empty; or
	// debits requests whether or not they fit (overdraw). It also gives
	// back the debits of a set denied on another Cluster slot (a refund).
	Settle
	// Seat acquires, renews, releases and counts the in-flight seats of an
	// identity.
	Seat
	// Reset forgets one state key: a full bucket or an empty window again.
	Reset
	// Admit takes an in-flight seat and makes a Decide call's decision in
	// one call, all or nothing.
	Admit
	// Finish settles calls and then releases their in-flight seats in one
	// call.
	Finish
	// Share records one member's demand on a shared limit and grants it
	// its max-min fair share.
	Share
	// Restore applies on a primary that took keys over from another the
	// writes the other made that it does not hold, by each key's lineage.
	Restore
)

// drivers names each script's driver: the file that reads its arguments,
// the clock and its keys, loops over its decisions, writes and replies.
var drivers = [...]string{Decide: "decide.lua", Batch: "batch.lua", Settle: "settle.lua", Seat: "seat.lua", Reset: "reset.lua", Admit: "admit.lua", Finish: "finish.lua", Share: "share.lua", Restore: "restore.lua"}

// sources are the scripts as Redis runs them: the files gen/<driver>,
// which go generate writes from the drivers and their parts (assemble). A
// script whose file is missing is "" until go generate ./lua writes it
// (TestGenerated fails meanwhile).
var sources = func() (src [len(drivers)]string) {
	for s, driver := range drivers {
		b, _ := generated.ReadFile("gen/" + driver)
		src[s] = string(b)
	}
	return src
}()

var hashes = func() (h [len(sources)]string) {
	for i, s := range sources {
		sum := sha1.Sum([]byte(s))
		h[i] = hex.EncodeToString(sum[:])
	}
	return h
}()

// String returns the script's name, its driver's file name without
// ".lua": "decide", "batch", "settle", "seat", "reset", "admit", "finish",
// "share" or "restore".
func (s Script) String() string {
	if int(s) < len(drivers) {
		return strings.TrimSuffix(drivers[s], ".lua")
	}
	return fmt.Sprintf("script(%d)", uint8(s))
}

// Source returns the full text of s as sent with EVAL or SCRIPT LOAD, or ""
// for an unknown script.
func (s Script) Source() string {
	if int(s) >= len(sources) {
		return ""
	}
	return sources[s]
}

// Hash returns the SHA-1 of s's source in lower-case hex, the name EVALSHA
// calls it by, or "" for an unknown script.
func (s Script) Hash() string {
	if int(s) >= len(hashes) {
		return ""
	}
	return hashes[s]
}
