package lua

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

var update = flag.Bool("update", false, "write gen/*.lua from the drivers and their parts (go generate ./lua)")

// TestGenerated checks that gen/<driver> holds each script exactly as
// assembling the *.lua sources gives it, that Source sends that file, and
// that gen/ holds no file of a script that no longer exists. With -update
// (go generate ./lua) it writes the files instead.
func TestGenerated(t *testing.T) {
	assembled, err := assemble(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for s, driver := range drivers {
		want[driver] = true
		name := filepath.Join("gen", driver)
		if *update {
			if err := os.WriteFile(name, []byte(assembled[s]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%v: run go generate ./lua", err)
			continue
		}
		if !bytes.Equal(got, []byte(assembled[s])) {
			t.Errorf("%s differs from what assembling %s and its parts gives: edit the sources, then run go generate ./lua", name, driver)
		}
		if Script(s).Source() != string(got) {
			t.Errorf("%s.Source() is not %s: rebuild after go generate ./lua", Script(s), name)
		}
	}
	stray, err := filepath.Glob(filepath.Join("gen", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stray {
		if want[filepath.Base(name)] {
			continue
		}
		if *update {
			if err := os.Remove(name); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is no script's: run go generate ./lua, which removes it", name)
	}
}

// TestEveryAlgorithmHasBlocks checks that algorithmBlocks names every
// tollgate.Algorithm (each value a Limit accepts) and nothing else, and
// that each has its judge, settle and debt blocks, each beginning with what
// it reads and sets.
func TestEveryAlgorithmHasBlocks(t *testing.T) {
	var algs []tollgate.Algorithm
	for a := tollgate.Algorithm(0); a < 255; a++ {
		if (tollgate.Limit{Algorithm: a, Rate: 1, Period: time.Second}).Validate() == nil {
			algs = append(algs, a)
		}
	}
	if len(algs) < 4 {
		t.Fatalf("the algorithms a Limit accepts: %v, want at least the four", algs)
	}
	for _, a := range algs {
		name, ok := algorithmBlocks[a]
		if !ok {
			t.Errorf("algorithm %s (%d) has no blocks in algorithmBlocks", a, a)
			continue
		}
		if name != a.String() {
			t.Errorf("algorithm %s's blocks are named %q, want its name", a, name)
		}
		for _, block := range []string{name + ".lua", "settle_" + name + ".lua", "debt_" + name + ".lua"} {
			src, err := os.ReadFile(block)
			if err != nil {
				t.Errorf("algorithm %s: %v", a, err)
				continue
			}
			if !bytes.HasPrefix(src, []byte("-- reads: ")) || !bytes.Contains(src, []byte("\n-- sets:  ")) {
				t.Errorf("%s does not begin with its inputs and outputs (-- reads: ..., -- sets: ...)", block)
			}
		}
	}
	for a := range algorithmBlocks {
		if !slices.Contains(algs, a) {
			t.Errorf("algorithmBlocks names %d, which is no algorithm a Limit accepts", a)
		}
	}
}

// TestGeneratedNoticesAnEdit assembles the scripts from a copy of the
// sources whose token_bucket.lua has one line more: the decide, batch and
// settle scripts differ from their generated files, so TestGenerated
// cannot pass when a block is edited and go generate ./lua is not run.
func TestGeneratedNoticesAnEdit(t *testing.T) {
	dir := t.TempDir()
	names, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "token_bucket.lua" {
			src = append(src, "-- an edit\n"...)
		}
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edited, err := assemble(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Script{Decide, Batch, Settle} {
		if edited[s] == s.Source() {
			t.Errorf("the %s script assembled after an edit of token_bucket.lua equals its generated file", s)
		}
	}
	if edited[Reset] != Reset.Source() {
		t.Errorf("the reset script, which judges nothing, changed with token_bucket.lua")
	}
}
