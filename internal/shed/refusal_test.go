package shed

import (
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/overload"
)

// A refusal says what was shed, why and when to come back, and is
// overload.ErrShed.
func TestRefusalSaysWhatWhyAndWhen(t *testing.T) {
	r := &Refusal{Refusal: overload.Refusal{Criticality: SheddablePlus, RetryAfter: 312*time.Millisecond + 400*time.Microsecond}, Reason: QueueTimeout}
	if got, want := r.Error(), "overload: SHEDDABLE_PLUS call shed (queue timeout); retry after 312ms"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(r, overload.ErrShed) {
		t.Error("a Refusal is not overload.ErrShed")
	}
}
