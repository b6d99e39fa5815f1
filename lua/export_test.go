package lua

import (
	"os"
	"strings"
)

// Arith is arith.lua, for tests that call its functions directly.
var Arith = func() string {
	b, err := os.ReadFile("arith.lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// SourceIn returns script s as lua.go assembles it from the *.lua files in
// dir instead of the embedded ones: another version's, for the benchmarks
// that measure two versions side by side.
func SourceIn(dir string, s Script) (string, error) {
	sources, err := assemble(os.DirFS(dir))
	return sources[s], err
}

// SourceAt returns the decide script with the server's clock replaced by
// its last two arguments, seconds and microseconds as TIME answers them, so
// that a test decides at instants of its choosing: the call's ARGV are the
// usual ones followed by those two. It panics if the script no longer reads
// the clock and counts its entries where expected.
func SourceAt() string {
	return replaceOnce(replaceOnce(Decide.Source(),
		"call('TIME')", "{ARGV[#ARGV - 1], ARGV[#ARGV]}"),
		"local entries = (#ARGV - head) / 5", "local entries = (#ARGV - head - 2) / 5")
}

// BatchSourceAt is SourceAt for the batch script: its ARGV are the usual
// ones followed by the clock's seconds and microseconds.
func BatchSourceAt() string {
	return replaceOnce(replaceOnce(Batch.Source(),
		"call('TIME')", "{ARGV[#ARGV - 1], ARGV[#ARGV]}"),
		"local nargv = #ARGV", "local nargv = #ARGV - 2")
}

func replaceOnce(src, old, new string) string {
	if strings.Count(src, old) != 1 {
		panic("lua: the decide script does not hold " + old + " exactly once")
	}
	return strings.Replace(src, old, new, 1)
}

// SettleSourceAt is SourceAt for the settle script: its ARGV are the usual
// ones followed by the clock's seconds and microseconds.
func SettleSourceAt() string {
	return replaceOnce(replaceOnce(Settle.Source(),
		"call('TIME')", "{ARGV[#ARGV - 1], ARGV[#ARGV]}"),
		"local entries = (#ARGV - 3) / 8", "local entries = (#ARGV - 5) / 8")
}

// RestoreSourceAt is SourceAt for the restore script: its ARGV are the usual
// ones followed by the clock's seconds and microseconds.
func RestoreSourceAt() string {
	return replaceOnce(replaceOnce(Restore.Source(),
		"call('TIME')", "{ARGV[#ARGV - 1], ARGV[#ARGV]}"),
		"local entries = (#ARGV - 2) / 14", "local entries = (#ARGV - 4) / 14")
}
