package grpctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// grpcurlHint is how to install grpcurl, which .ci/run does.
const grpcurlHint = "go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"

// Grpcurl returns the grpcurl binary: on PATH, or where go install puts
// it. Without it the test fails, saying how to install it.
func Grpcurl(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "grpcurl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("grpcurl is needed to run the documentation's commands and is not installed: %s", grpcurlHint)
	return ""
}

// DocCommand is one grpcurl command of a documentation page: its text,
// continuation lines joined as a shell joins them, and what the page says
// it prints: the next fenced block, when it holds no command and starts
// with "{" (a JSON answer), else "".
type DocCommand struct {
	Page, Text, Output string
}

// GrpcurlCommands returns the grpcurl commands of pages, in order.
func GrpcurlCommands(t testing.TB, pages ...string) []DocCommand {
	t.Helper()
	var out []DocCommand
	for _, page := range pages {
		blocks := fencedBlocks(t, page)
		for i, b := range blocks {
			cmds := commandsOf(b)
			for j, c := range cmds {
				dc := DocCommand{Page: filepath.Base(page), Text: c}
				if j == len(cmds)-1 && i+1 < len(blocks) {
					next := blocks[i+1]
					if len(commandsOf(next)) == 0 && len(next) > 0 && strings.HasPrefix(next[0], "{") {
						dc.Output = strings.Join(next, "\n")
					}
				}
				out = append(out, dc)
			}
		}
	}
	return out
}

// fencedBlocks returns the lines of each fenced code block of page.
func fencedBlocks(t testing.TB, page string) [][]string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if inCode {
				blocks = append(blocks, cur)
			}
			inCode, cur = !inCode, nil
			continue
		}
		if inCode {
			cur = append(cur, line)
		}
	}
	return blocks
}

// commandsOf returns the grpcurl commands of one block.
func commandsOf(block []string) []string {
	var out []string
	cmd := ""
	for _, line := range block {
		if cmd != "" || strings.HasPrefix(line, "grpcurl ") {
			cmd += line + "\n"
			if !strings.HasSuffix(line, `\`) {
				out = append(out, strings.TrimSuffix(cmd, "\n"))
				cmd = ""
			}
		}
	}
	return out
}
