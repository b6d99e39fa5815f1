package region

import (
	"context"
	"time"

	"github.com/tollgate/tollgate"
)

// Picture is the global and the local picture of one identity under one
// global limit, as PeekGlobal sees it.
type Picture struct {
	// Local is what Allow would answer here now (the local store's Peek
	// under the share in force).
	Local tollgate.Decision
	// Share is this process's share in force: rate units per period (with
	// Burst, its part of the burst), or the units it may admit in Window.
	Share, Burst int64
	// Floor is every region's floor.
	Floor int64
	// Leased says Share is from the Home (false: the floor).
	Leased bool
	// LeaseLeft is how long the lease lasts here without a renewal.
	LeaseLeft time.Duration
	// Window is the window Share is for (a window's limit).
	Window int64
	// Regions is every region's holding as the Home has it now (this one
	// included, with its processes); nil when the Home could not be read
	// (HomeErr).
	Regions []tollgate.ShareHolding
	HomeErr error
	// Free is what the Home has left to grant: the limit less every
	// region's share in Window (at least its floor; a region with no
	// holding, its floor).
	Free int64
	// Settling is how long the Home still grants no region more than it
	// holds, having found it may have forgotten grants (a restart, a
	// flush, a failover).
	Settling time.Duration
}

// PeekGlobal returns the picture of req's identity under req's global
// limit: this region's share and decision, and what the Home holds of
// every region. It writes nothing. Only a request the region refuses
// (tollgate.ErrInvalidRequest) is an error; a Home that cannot be read is
// said in the Picture.
func (r *Region) PeekGlobal(ctx context.Context, req tollgate.Request) (Picture, error) {
	local, err := r.Peek(ctx, req)
	if err != nil {
		return Picture{}, err
	}
	e, err := r.lookup(req)
	if err != nil {
		return Picture{}, err
	}
	now := time.Now()
	p := e.plan.Load()
	sh := e.sh
	pic := Picture{Local: local, Share: e.inForce(p, now, r.s.skew), Floor: sh.floor}
	if sh.window {
		pic.Window, _, _ = sh.windowAt(now)
	} else {
		pic.Burst = sh.burst(pic.Share)
	}
	if !p.granted.IsZero() && now.Before(p.until) && (!sh.window || p.window == pic.Window) {
		pic.Leased, pic.LeaseLeft = true, p.until.Sub(now)
	}
	g, err := r.home.Look(ctx, shareKey(req.Key, sh.limit), pic.Window, r.s.lease)
	if err != nil {
		pic.HomeErr = err
		return pic, nil
	}
	pic.Regions, pic.Settling = g.Others, g.Settling
	taken := int64(sh.regions-len(g.Others)) * sh.floor
	for _, h := range g.Others {
		taken += max(sh.floor, h.Share)
	}
	pic.Free = max(0, sh.limit.Rate-taken)
	return pic, nil
}
