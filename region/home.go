package region

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
)

// Home is where the regions sharing global limits meet: it keeps, for each
// identity and limit, every region's share, demand and use, and grants a
// region what it asks only out of what the other regions' shares in force
// leave. RedisHome keeps them on one Redis, MemoryHome in process.
type Home interface {
	// Report records each report and answers it, in order. An error means
	// the Home could not be asked; a report the Home refused has its
	// Reply.Err set (ErrDisagree, ErrStale).
	Report(ctx context.Context, reports []Report) ([]Reply, error)
	// Look returns what the Home holds of key under limit, writing
	// nothing: every region's holding, and the Home's clock.
	Look(ctx context.Context, key string, limit tollgate.Limit) ([]Holding, time.Time, error)
}

// Report is one region's report on one identity under one global limit.
type Report struct {
	// Key is the identity, as tollgate.Request.Key.
	Key string
	// Limit is the global limit, normalized (a rate's Burst spelled out).
	Limit tollgate.Limit
	// Region names the reporting region.
	Region string
	// Regions is how many regions share the limit; Floor every region's
	// floor. Every report on one identity and limit must say the same.
	Regions int
	Floor   int64
	// Window is the window reported on (a FixedWindow's number, as the
	// scripts number them); 0 for a rate.
	Window int64
	// Demand is what the region asks over the next while: units per the
	// limit's period for a rate, units over the next lease for a window.
	Demand int64
	// Used is, for a window, how many units the region admitted in it.
	Used int64
	// Want is the share asked for, at least Floor: the Home grants it
	// when the other regions' shares leave that much, or what they leave
	// (at least what the region held). It must be no less than what the
	// region may use until the answer reaches it.
	Want int64
	// Keep is how long the Home holds the grant: the lease of a rate, or
	// past the window's end for a window.
	Keep time.Duration
}

// Reply is the Home's answer to a Report.
type Reply struct {
	// Granted is the share the region holds now, at least the Floor.
	Granted int64
	// At is the Home's clock when it granted.
	At time.Time
	// Others are the other regions' holdings, as the Home had them.
	Others []Holding
	// Err, when set, says why the Home refused the report (nothing
	// granted, nothing written).
	Err error
}

// Holding is what the Home holds of one region for one identity and limit.
type Holding struct {
	// Region names the region.
	Region string
	// Window is the window Share is for (0 for a rate).
	Window int64
	// Share is the region's share: rate units per period, or the units it
	// may admit in Window.
	Share int64
	// Demand and Used are what the region last reported.
	Demand, Used int64
	// Left is how long the Home keeps the holding without another report:
	// for a rate, what is left of its lease.
	Left time.Duration
}

// ErrDisagree is a Reply.Err: the report's Regions or Floor differ from
// those the other regions reported, or more regions report than it says.
var ErrDisagree = errors.New("region: the regions disagree on the regions sharing a limit or on their floor")

// ErrStale is a Reply.Err: the report is for a window older than one the
// region, or another region by more than one window, already reported on.
var ErrStale = errors.New("region: the report is for a window already past")

// homeKey is the Home's key of key under l: a hash of the identity (so no
// identity can reach another's key, and one Cluster slot holds it) and
// the limit's numbers.
func homeKey(prefix, key string, l tollgate.Limit) string {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s{%s}:%d:%d:%d:%d:%d", prefix, hex.EncodeToString(sum[:16]),
		l.Algorithm, l.Rate, l.Period.Microseconds(), l.Burst, l.Calendar)
}
