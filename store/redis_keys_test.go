package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/partkey"
	"github.com/tollgate/tollgate/internal/redistest"
)

// unescapeTag reverses the percent-escaping of a verbatim tag.
func unescapeTag(t *testing.T, tag string) string {
	var b strings.Builder
	for i := 0; i < len(tag); i++ {
		if tag[i] != '%' {
			b.WriteByte(tag[i])
			continue
		}
		if i+2 >= len(tag) {
			t.Fatalf("tag %q: truncated escape at %d", tag, i)
		}
		v, err := strconv.ParseUint(tag[i+1:i+3], 16, 8)
		if err != nil {
			t.Fatalf("tag %q: bad escape at %d: %v", tag, i, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String()
}

func TestDecisionKeysLayout(t *testing.T) {
	h := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	for _, tc := range []struct {
		identity, id string
		alg          tollgate.Algorithm
		base         string
	}{
		{"user42", "", tollgate.TokenBucket, "tollgate:{user42}:tb"},
		{"api:tenant-7/user@example.com", "req-1", tollgate.GCRA, "tollgate:{api:tenant-7/user@example.com}:gcra"},
		{"a{b}c", "", tollgate.SlidingWindow, "tollgate:{a%7Bb%7Dc}:sw"},
		{"rule\x00ck:alice", "", tollgate.FixedWindow, "tollgate:{rule%00ck:alice}:fw"},
		{"100%#", "", tollgate.TokenBucket, "tollgate:{100%25%23}:tb"},
		{"", "", tollgate.TokenBucket, "tollgate:{#" + h("") + "}:tb"},
		{strings.Repeat("x", 65), "", tollgate.TokenBucket, "tollgate:{#" + h(strings.Repeat("x", 65)) + "}:tb"},
		{strings.Repeat("{", 22), "", tollgate.TokenBucket, "tollgate:{#" + h(strings.Repeat("{", 22)) + "}:tb"},
	} {
		keys := decisionKeys("tollgate:", tc.alg, tc.identity, tc.id)
		want := []string{tc.base}
		if tc.id != "" {
			want = append(want, tc.base+":r:"+h(tc.id))
		}
		if strings.Join(keys, " ") != strings.Join(want, " ") {
			t.Errorf("decisionKeys(%q, %q, %s)\n got %q\nwant %q", tc.identity, tc.id, tc.alg, keys, want)
		}
	}
}

func TestDecisionKeysAllocations(t *testing.T) {
	// Request ids of every valid length, including idempotency's 32 hex digits.
	for _, id := range []string{"", "0123456789abcdef", strings.Repeat("f", 32), strings.Repeat("x", tollgate.MaxRequestIDLen)} {
		allocs := testing.AllocsPerRun(100, func() {
			decisionKeys("tollgate:", tollgate.GCRA, "api:tenant-7:user-42", id)
		})
		// One backing string for the names and the slice of them.
		if allocs > 2 {
			t.Errorf("decisionKeys with a %d-byte request id allocates %v times per call, want at most 2", len(id), allocs)
		}
	}
}

// TestSlotMatchesRedis checks slot, by which AllowAll groups a set and on
// which the fuzz test relies, against the Cluster's own CLUSTER KEYSLOT.
func TestSlotMatchesRedis(t *testing.T) {
	c := redistest.SharedCluster(t).Client(t)
	ctx := context.Background()
	for _, identity := range []string{"user42", "", "{", "}", "{}{}", "a{b}c", "\xff\x00binary", strings.Repeat("z", 300)} {
		for _, key := range decisionKeys("tollgate:", tollgate.SlidingWindow, identity, "id-1") {
			got, err := c.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(got) != slot(key) {
				t.Fatalf("CLUSTER KEYSLOT %q = %d, slot computes %d", key, got, slot(key))
			}
		}
	}
}

// FuzzKeys checks, for any identity, request id and algorithm, that a
// decision's keys share one slot and the identity's own tag, that tags are
// either a faithful escape of the identity or its hash (never both shapes for
// different identities), and that different identities, ids or algorithms
// never share a key.
func FuzzKeys(f *testing.F) {
	f.Add("user42", "user43", "req-1", uint8(0))
	f.Add("{", "}", "", uint8(1))
	f.Add("{}{}", "%7B%7D%7B%7D", "x", uint8(2))
	f.Add("", "#", "", uint8(3))
	f.Add(strings.Repeat("a", 64), strings.Repeat("a", 65), "id", uint8(0))
	f.Add("t\x1fsecond", "t\x1fhour", "id", uint8(0))
	f.Add("t\x1fa:r:x", "t\x1fa", "x", uint8(1))
	f.Add("t\x1f", "t", "", uint8(2))
	f.Add("t\x1f"+strings.Repeat("p", 70), "t\x1f\x1f", "", uint8(3))
	f.Fuzz(func(t *testing.T, identity, other, requestID string, algByte uint8) {
		alg := tollgate.Algorithm(algByte % 4)
		keys := decisionKeys("tollgate:", alg, identity, requestID)
		if want := 1 + min(len(requestID), 1); len(keys) != want {
			t.Fatalf("%d keys with request id %q, want %d", len(keys), requestID, want)
		}
		tag := hashTag(keys[0])
		seen := map[string]bool{}
		for _, k := range keys {
			if !strings.HasPrefix(k, "tollgate:{") {
				t.Fatalf("key %q does not start with the prefix and a tag", k)
			}
			if hashTag(k) != tag || slot(k) != slot(keys[0]) {
				t.Fatalf("key %q has tag %q (slot %d), the state key %q has %q (slot %d)",
					k, hashTag(k), slot(k), keys[0], tag, slot(keys[0]))
			}
			if seen[k] {
				t.Fatalf("key %q appears twice in %q", k, keys)
			}
			seen[k] = true
		}
		if strings.ContainsAny(tag, "{}") || tag == "" {
			t.Fatalf("tag %q is empty or holds a brace", tag)
		}
		head, part, hasPart := strings.Cut(identity, partkey.Separator)
		if !hasPart && "tollgate:{"+tag+"}:"+algorithmCode[alg] != keys[0] {
			t.Fatalf("state key %q is not prefix, tag and algorithm", keys[0])
		}
		if hasPart {
			rest, ok := strings.CutPrefix(keys[0], "tollgate:{"+tag+"}/")
			if mid, ok2 := strings.CutSuffix(rest, ":"+algorithmCode[alg]); !ok || !ok2 || strings.Contains(mid, ":") {
				t.Fatalf("state key %q of part %q is not prefix, tag, / part without colons, and algorithm", keys[0], part)
			}
		}
		if strings.HasPrefix(tag, "#") {
			sum := sha256.Sum256([]byte(head))
			if want := "#" + base64.RawURLEncoding.EncodeToString(sum[:16]); tag != want {
				t.Fatalf("hashed tag %q for %q, want %q", tag, identity, want)
			}
			if escapedTagLen(head) >= 0 {
				t.Fatalf("identity %q could be written out but was hashed", head)
			}
		} else {
			if strings.Contains(tag, "#") || len(tag) > maxVerbatimTag {
				t.Fatalf("verbatim tag %q holds the hash marker or is too long", tag)
			}
			if got := unescapeTag(t, tag); got != head {
				t.Fatalf("tag %q unescapes to %q, want the identity %q", tag, got, head)
			}
		}

		otherKeys := decisionKeys("tollgate:", alg, other, requestID)
		otherHead, _, _ := strings.Cut(other, partkey.Separator)
		if (otherHead == head) != (hashTag(otherKeys[0]) == tag) {
			t.Fatalf("identities %q and %q have tags %q and %q", head, otherHead, tag, hashTag(otherKeys[0]))
		}
		for i := range keys {
			if (other == identity) != (otherKeys[i] == keys[i]) {
				t.Fatalf("keys %q and %q have names %q and %q", identity, other, keys[i], otherKeys[i])
			}
		}
		if requestID != "" && keys[1] == otherKeys[0] || len(otherKeys) > 1 && otherKeys[1] == keys[0] {
			t.Fatalf("a marker of %q or %q is named like the other's state: %q, %q", identity, other, keys, otherKeys)
		}
		nextAlg := decisionKeys("tollgate:", (alg+1)%4, identity, requestID)
		for i := range keys {
			if seen[nextAlg[i]] {
				t.Fatalf("algorithms %s and %s share key %q", alg, (alg+1)%4, nextAlg[i])
			}
		}
		if requestID != "" {
			otherID := decisionKeys("tollgate:", alg, identity, requestID+"x")[1]
			if otherID == keys[1] {
				t.Fatalf("request ids %q and %q share the marker %q", requestID, requestID+"x", keys[1])
			}
		}
	})
}

func BenchmarkDecisionKeys(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		decisionKeys("tollgate:", tollgate.GCRA, "api:tenant-7:user-42", "0123456789abcdef")
	}
}

// The tagged layout: n tags, one in each n-th of the slot space, chosen
// the same way by every process; an identity's keys, its parts' included,
// all behind its shared tag and then named as in the default layout; and
// no tagged key is a default-layout key.
func TestTaggedLayout(t *testing.T) {
	for _, n := range []int{1, 3, 6, 48, 16384} {
		ps := tagPrefixes("p:", n)
		if len(ps) != n {
			t.Fatalf("%d tags: %d prefixes", n, len(ps))
		}
		seen := map[int]bool{}
		for k, p := range ps {
			s := slot(p + "x")
			if s < k*16384/n || s >= (k+1)*16384/n || seen[s] {
				t.Fatalf("%d tags: tag %d (%s) on slot %d, outside its range or shared", n, k, p, s)
			}
			seen[s] = true
		}
		if again := tagPrefixes("p:", n); !slices.Equal(again, ps) {
			t.Fatalf("%d tags: the tags differ between two computations", n)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used: the keys are named without Redis
	defer c.Close()
	tagged := newRedis(t, c, WithPrefix("p:"), WithClusterTags(6))
	plain := newRedis(t, c, WithPrefix("p:"))
	for _, id := range []string{"tenant-a", "", "{x}", "!1", strings.Repeat("long", 40), partkey.Join("tenant-a", "hour")} {
		gk := decisionKeys(tagged.keyPrefix(id), tollgate.TokenBucket, id, "req-1")
		pk := decisionKeys(plain.keyPrefix(id), tollgate.TokenBucket, id, "req-1")
		prefix := tagged.keys.tagPrefixes[tagOf(id, 6)]
		for i := range gk {
			if gk[i] != prefix+strings.TrimPrefix(pk[i], "p:") {
				t.Errorf("%q: tagged key %q, want %q and the default key's name", id, gk[i], prefix)
			}
			if slot(gk[i]) != slot(prefix) {
				t.Errorf("%q: tagged key %q off its shared tag's slot", id, gk[i])
			}
			if hashTag(pk[i])[0] == '!' {
				t.Errorf("%q: a default-layout key %q has a shared tag", id, pk[i])
			}
		}
	}
	if tagOf(partkey.Join("tenant-a", "hour"), 6) != tagOf("tenant-a", 6) {
		t.Error("an identity's part is behind another tag")
	}
	// Identities spread over the tags.
	count := make([]int, 6)
	for i := range 6000 {
		count[tagOf("user-"+strconv.Itoa(i), 6)]++
	}
	for k, c := range count {
		if c < 800 || c > 1200 {
			t.Errorf("tag %d holds %d of 6000 identities", k, c)
		}
	}
}
