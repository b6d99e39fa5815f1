package region_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/region"
	"github.com/tollgate/tollgate/store"
)

// Three regions share 600 calls a second of one tenant. Each decides on its
// own store (here Memory stores standing for each region's Redis) and meets
// the others at one Home (here in process; region.NewRedisHome in
// production). Until its first report a region decides under its floor, a
// tenth of the limit split among the regions.
func ExampleNew() {
	home := region.NewMemoryHome(nil)
	names := []string{"us-east", "eu-west", "ap-south"}
	limit := tollgate.PerSecond(600)
	var regions []*region.Region
	for _, name := range names {
		local, err := store.NewMemory()
		if err != nil {
			log.Fatal(err)
		}
		r, err := region.New(local, home, region.Config{
			Region:    name,
			Regions:   names,
			Limits:    []tollgate.Limit{limit},
			Rebalance: time.Second, // the default
		})
		if err != nil {
			log.Fatal(err)
		}
		defer r.Close(context.Background())
		regions = append(regions, r)
	}
	pic, err := regions[1].PeekGlobal(context.Background(), tollgate.Request{Key: "tenant-42", Limit: limit})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("eu-west decides under %d/s (burst %d), leased: %t; floor %d/s\n", pic.Share, pic.Burst, pic.Leased, pic.Floor)
	// Output: eu-west decides under 20/s (burst 20), leased: false; floor 20/s
}

// A configuration mistake is an error at start-up, before anything is
// written.
func ExampleNew_badConfig() {
	local, err := store.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	_, err = region.New(local, region.NewMemoryHome(nil), region.Config{
		Region:  "eu-west",
		Regions: []string{"us-east", "eu-west", "ap-south"},
		Limits:  []tollgate.Limit{tollgate.PerSecond(2)},
	})
	fmt.Println(err)
	// Output: region: invalid configuration: limit token_bucket 2/1s burst 2: the global limit 2 is below the number of regions 3: each region needs at least one unit of floor
}
