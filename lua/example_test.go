package lua_test

import (
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/lua"
)

// Each script is named, sent as its generated file reads, and called by
// the SHA-1 of that text.
func Example() {
	s := lua.Decide
	fmt.Println(s, len(s.Hash()), strings.HasPrefix(s.Source(), "-- Code generated"))
	// Output:
	// decide 40 true
}
