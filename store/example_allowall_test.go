package store_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/store"
)

// Two limits of one tenant and a global one, all or nothing: the third set
// is denied by the global limit and debits none of the three. The tenant's
// limits are parts of its identity (its Key, the byte 0x1F and the part's
// name), which the Redis store keeps on one hash tag.
func ExampleMemory_AllowAll() {
	st, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	set := []tollgate.Request{
		{Key: "tenant-7\x1fsecond", Limit: tollgate.PerSecond(5)},
		{Key: "tenant-7\x1fhour", Limit: tollgate.PerHour(20)},
		{Key: "global", Limit: tollgate.PerHour(2)},
	}
	for range 3 {
		ds, err := st.AllowAll(ctx, set)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(ds[0].Allowed, ds[0].Remaining, ds[1].Remaining, ds[2].Remaining)
	}
	d, _ := st.Peek(ctx, set[1])
	fmt.Println("hour, peeked:", d.Allowed, d.Remaining)
	// Output:
	// true 4 19 1
	// true 3 18 0
	// false 2 17 0
	// hour, peeked: true 17
}
