package region

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
)

// Home is where the regions sharing global limits meet: a tollgate share
// store (package store's Share, one script on Redis) keeping, for each
// identity and limit, every member's share, lease and demand, and
// granting a region's members what the other regions' shares in force
// leave. NewRedisHome keeps them on one Redis, NewMemoryHome in process.
//
// A region is a group of members, its processes; every process of a
// region is granted the region's share, and decides under it on the
// region's own store.
type Home interface {
	// Share records each report and answers it, in order (see
	// tollgate.ShareStore). An error means the Home could not be asked; a
	// report it refused has its ShareGrant.Refused set
	// (tollgate.ErrShareDisagree, ErrShareStale, ErrShareLate).
	Share(ctx context.Context, reports []tollgate.Share) ([]tollgate.ShareGrant, error)
	// Look returns what the Home holds of a shared key in window (0 for a
	// rate), writing nothing: every region (ShareGrant.Others), the
	// Home's clock (At), and how long it still settles after forgetting
	// (Settling, for the lease given).
	Look(ctx context.Context, key string, window int64, lease time.Duration) (tollgate.ShareGrant, error)
}

// shareKey is the Home's name of key under l: a hash of the identity (so
// that no identity can reach another's, and any identity fits) and the
// limit's numbers.
func shareKey(key string, l tollgate.Limit) string {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s:%d:%d:%d:%d:%d", hex.EncodeToString(sum[:16]), l.Algorithm, l.Rate, l.Period.Microseconds(), l.Burst, l.Calendar)
}
