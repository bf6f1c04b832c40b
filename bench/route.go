package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/slots"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// SlotRoute sends each request to the node serving its key's hash slot, as
// a cluster-aware Redis client does (go-redis's ClusterClient, rueidis):
// learned once from CLUSTER SLOTS, each range's master.
type SlotRoute struct {
	// Addrs are the masters' RESP addresses.
	Addrs []string
	// node[slot] is the index in Addrs of the slot's master.
	node [slots.Count]uint8
}

// Node returns the index in Addrs of the master of key's slot.
func (r *SlotRoute) Node(key []byte) int { return int(r.node[slots.Of(key)]) }

// ClusterRoute asks the node at addr for CLUSTER SLOTS and returns the
// route it describes; every slot must have a master.
func ClusterRoute(ctx context.Context, addr string) (*SlotRoute, error) {
	v, err := doAt(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	r := &SlotRoute{}
	covered := 0
	for _, rng := range v.Elems {
		if len(rng.Elems) < 3 || len(rng.Elems[2].Elems) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed range %v", rng)
		}
		first, last := rng.Elems[0].Int, rng.Elems[1].Int
		master := rng.Elems[2].Elems
		a := master[0].Str + ":" + strconv.FormatInt(master[1].Int, 10)
		i := slices.Index(r.Addrs, a)
		if i < 0 {
			if len(r.Addrs) == 255 {
				return nil, fmt.Errorf("CLUSTER SLOTS: more than 255 masters")
			}
			r.Addrs = append(r.Addrs, a)
			i = len(r.Addrs) - 1
		}
		if first < 0 || last >= slots.Count || first > last {
			return nil, fmt.Errorf("CLUSTER SLOTS: range %d-%d", first, last)
		}
		for s := first; s <= last; s++ {
			r.node[s] = uint8(i)
		}
		covered += int(last - first + 1)
	}
	if covered != slots.Count {
		return nil, fmt.Errorf("CLUSTER SLOTS covers %d of %d slots", covered, slots.Count)
	}
	return r, nil
}

// waitClusterRoute polls ClusterRoute until its masters are want distinct
// nodes (a cluster whose groups' leaders have spread), or until timeout.
func waitClusterRoute(ctx context.Context, addr string, want int, timeout time.Duration) (*SlotRoute, error) {
	var r *SlotRoute
	err := testkit.PollContext(ctx, timeout, 100*time.Millisecond, func() error {
		var err error
		if r, err = ClusterRoute(ctx, addr); err == nil && len(r.Addrs) != want {
			err = fmt.Errorf("%d distinct masters, want %d", len(r.Addrs), want)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster route: %w", err)
	}
	return r, nil
}
