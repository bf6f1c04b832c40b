package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
)

// finalReads reads every zero-refill key through every node with RL.PEEK
// (a linearizable read through the log). Nothing comes back to those keys,
// so every node must report the same units remaining. (The other fields,
// and other keys, move with the time of each read.)
func (c *cluster) finalReads(keys []*keySpec) []finalRead {
	var reads []finalRead
	for _, k := range keys {
		if !k.Zero {
			continue
		}
		fr := finalRead{key: k, ok: true}
		for i, nd := range c.nodes {
			r, err := command(nd.RESP, 5*time.Second, "RL.PEEK", k.Name)
			rem, text := int64(-1), ""
			switch v, isInts := r.Ints(); {
			case err != nil:
				text = "error: " + err.Error()
			case r.Error() != "":
				text = "-" + r.Error()
			case r.IsNull():
				rem, text = k.Limit, "nil"
			case isInts && len(v) == 5:
				rem, text = v[2], r.String()
			default:
				text = "malformed " + r.String()
			}
			fr.nodes = append(fr.nodes, nd.ID+"="+text)
			if rem < 0 || (i > 0 && rem != fr.rem) {
				fr.ok = false
			}
			fr.rem = rem
		}
		reads = append(reads, fr)
	}
	return reads
}

// digests waits until every Raft group has a leader and every node has
// applied the same log of every group (equal applied and commit indexes,
// unchanged across the reading of the digests), then returns each node's
// DEBUG DIGEST: a hash of its own engine state, all groups' engines
// together, and the applied index of each group.
func (c *cluster) digests(ctx context.Context, timeout time.Duration) ([]string, []uint64, error) {
	var (
		ds   []string
		idx  []uint64
		last error // the last error seen: a try that only saw indexes move keeps it
	)
	err := testkit.PollContext(ctx, timeout, 100*time.Millisecond, func() error {
		var same bool
		var err error
		ds = nil
		idx, same, err = c.appliedIndexes()
		if err == nil && same {
			for _, nd := range c.nodes {
				r, derr := command(nd.RESP, 5*time.Second, "DEBUG", "DIGEST")
				if derr != nil || r.Error() != "" {
					err = fmt.Errorf("DEBUG DIGEST on %s: %v %s", nd.ID, derr, r.Error())
					break
				}
				ds = append(ds, nd.ID+"="+r.Str)
			}
			if err == nil {
				idx2, same2, err2 := c.appliedIndexes()
				if err2 == nil && same2 && slices.Equal(idx2, idx) {
					return nil
				}
			}
		}
		if err != nil {
			last = err
		}
		if last == nil {
			return errors.New("replicas did not reach the same applied index")
		}
		return fmt.Errorf("replicas did not reach the same applied index (%w)", last)
	})
	if err != nil {
		return nil, nil, err
	}
	return ds, idx, nil
}

// appliedIndexes reports whether every Raft group has a leader and every
// node has applied everything it knows committed of every group, and the
// same as the others; it returns each group's index.
func (c *cluster) appliedIndexes() ([]uint64, bool, error) {
	idx := make([]uint64, c.shards)
	same := true
	var desc []string
	for g := range c.shards {
		var first, leader string
		for i, nd := range c.nodes {
			st, err := proccluster.RaftStatus(nd, g, 2*time.Second)
			if err != nil {
				return nil, false, fmt.Errorf("RAFT.STATUS %d on %s: %w", g, nd.ID, err)
			}
			a, cm := st["applied_index"], st["commit_index"]
			d := fmt.Sprintf("%s applied %s commit %s", nd.ID, a, cm)
			if c.shards > 1 {
				d = fmt.Sprintf("group %d: %s", g, d)
			}
			desc = append(desc, d)
			if a != cm || a == "" {
				same = false
			}
			if i == 0 {
				first = a
			} else if a != first {
				same = false
			}
			if st["role"] == "leader" {
				leader = nd.ID
			}
		}
		if leader == "" {
			same = false
			desc = append(desc, fmt.Sprintf("group %d has no leader", g))
		}
		if _, err := fmt.Sscan(first, &idx[g]); err != nil {
			return nil, false, fmt.Errorf("group %d: applied index %q: %w (%s)", g, first, err, strings.Join(desc, ", "))
		}
	}
	if !same {
		return idx, false, fmt.Errorf("%s", strings.Join(desc, ", "))
	}
	return idx, true, nil
}
