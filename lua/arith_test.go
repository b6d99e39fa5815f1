package lua_test

import (
	"context"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/algo"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/lua"
)

// mulDivScript runs arith.lua's three functions on Redis over a batch of
// (a, b, d) triples and returns, for each, muldiv's quotient and remainder,
// mulfloor and mulceil. Replies are integers: Redis truncates Lua numbers,
// which is exact below 2^53.
var mulDivScript = redis.NewScript(`local floor, ceil, max = math.floor, math.ceil, math.max
local rate, capacity, period, span = 1, 1, 2^53, 0 -- a limit large enough to define them
` + lua.Arith + `
local out = {}
for i = 1, #ARGV, 3 do
  local a, b, d = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local q, r = muldiv(a, b, d)
  out[#out + 1] = q
  out[#out + 1] = r
  out[#out + 1] = mulfloor(a, b, d)
  out[#out + 1] = mulceil(a, b, d)
end
return out`)

// TestMulDivIsExact checks arith.lua's muldiv, mulfloor and mulceil
// against big.Int on the edges of their range (operands near 2^52, divisors
// near 2^50, quotients near 2^52, products just above and below 2^53) and
// on random triples of every magnitude, on a real Redis's Lua, and checks
// that the Go mirror's MulDiv agrees.
func TestMulDivIsExact(t *testing.T) {
	c := redistest.Single(t).Client(t)
	ctx := context.Background()
	const (
		maxOperand  = 1<<52 - 1
		maxDivisor  = 1<<50 - 1
		maxQuotient = 1<<52 - 1
	)
	var triples [][3]int64
	add := func(a, b, d int64) {
		if a < 0 || b < 0 || d <= 0 || a > maxOperand || b > maxOperand || d > maxDivisor {
			return
		}
		if q := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(d)); q.Cmp(big.NewInt(maxQuotient)) > 0 {
			return
		}
		triples = append(triples, [3]int64{a, b, d})
	}
	// Products around 2^53, where the fast path ends.
	for _, p := range []int64{1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<53 + 2} {
		for _, a := range []int64{1, 2, 3, 7, 1 << 26, 94906265, 94906267} {
			if p%a == 0 {
				add(a, p/a, 1)
				add(a, p/a, 3)
				add(a, p/a, 1<<26+1)
			}
		}
	}
	add(1<<27, 1<<26, 1)
	add(1<<27+1, 1<<26+1, 3)
	// The limits' extremes: 10^12 units over 366 days, refills to 2^52 us.
	const maxRate, maxPeriod = 1_000_000_000_000, 366 * 86_400_000_000
	for _, a := range []int64{1, maxRate - 1, maxRate} {
		for _, b := range []int64{1, 1000, maxPeriod - 1, maxPeriod} {
			for _, d := range []int64{1, 3, 7, 1000, 999_999_999_989, maxRate, maxPeriod} {
				add(a, b, d)
				add(b, a, d)
			}
		}
	}
	// Quotients at the top of the range, with every remainder class.
	for _, d := range []int64{maxDivisor, maxDivisor - 1, 1<<49 + 1, 1_000_003} {
		for _, a := range []int64{maxOperand, maxOperand - 1, 1 << 51} {
			b := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(maxQuotient), big.NewInt(d)), big.NewInt(a)).Int64()
			for _, db := range []int64{0, -1, -2, -3} {
				add(a, b+db, d)
			}
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for len(triples) < 20_000 {
		// Log-uniform magnitudes, so that every size is well represented.
		a := rng.Int64N(1 << rng.IntN(53))
		b := rng.Int64N(1 << rng.IntN(53))
		d := 1 + rng.Int64N(1<<rng.IntN(51))
		add(a, b, d)
	}

	for start := 0; start < len(triples); start += 500 {
		batch := triples[start:min(start+500, len(triples))]
		argv := make([]any, 0, 3*len(batch))
		for _, tr := range batch {
			argv = append(argv, tr[0], tr[1], tr[2])
		}
		got, err := mulDivScript.Run(ctx, c, nil, argv...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for i, tr := range batch {
			a, b, d := tr[0], tr[1], tr[2]
			prod := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			q, r := new(big.Int).QuoRem(prod, big.NewInt(d), new(big.Int))
			ceil := new(big.Int).Set(q)
			if r.Sign() > 0 {
				ceil.Add(ceil, big.NewInt(1))
			}
			want := []int64{q.Int64(), r.Int64(), q.Int64(), ceil.Int64()}
			if g := got[4*i : 4*i+4]; g[0] != want[0] || g[1] != want[1] || g[2] != want[2] || g[3] != want[3] {
				t.Fatalf("muldiv(%d, %d, %d): Lua {q r floor ceil} = %v, want %v", a, b, d, g, want)
			}
			if gq, gr := algo.MulDiv(a, b, d); gq != want[0] || gr != want[1] {
				t.Fatalf("algo.MulDiv(%d, %d, %d) = %d, %d, want %d, %d", a, b, d, gq, gr, want[0], want[1])
			}
		}
	}
	slow := 0
	for _, tr := range triples {
		if hi, lo := bits.Mul64(uint64(tr[0]), uint64(tr[1])); hi > 0 || lo >= 1<<53 {
			slow++
		}
	}
	t.Logf("%d triples exact, %d of them with a product of 2^53 or more", len(triples), slow)
	if slow < len(triples)/4 {
		t.Fatalf("only %d of %d triples take the exact slow path: the test proves little", slow, len(triples))
	}
}
