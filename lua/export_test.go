package lua

import (
	"strings"

	"github.com/tollgate/tollgate"
)

// Arith is arith.lua, for tests that call its functions directly.
var Arith = arith

// serverClock is how the scripts read the clock.
const serverClock = "call('TIME')"

// SourceAt returns the script for a with the server's clock replaced by
// the last two arguments, seconds and microseconds as TIME answers them, so
// that a test decides at instants of its choosing. A call without a
// request id passes "" as ARGV[5] and ARGV[6] before them (an empty
// max_replays reads as no request id). It panics if the script no longer
// reads the clock where expected.
func SourceAt(a tollgate.Algorithm) string {
	src := Source(a)
	if strings.Count(src, serverClock) != 1 {
		panic("lua: the script does not read the clock with " + serverClock + " exactly once")
	}
	return strings.Replace(src, serverClock, "{ARGV[#ARGV - 1], ARGV[#ARGV]}", 1)
}
