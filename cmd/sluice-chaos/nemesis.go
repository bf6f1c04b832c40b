package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// faultKind is one kind of fault the nemesis injects.
type faultKind int

// With several Raft groups, "the leader" of a fault is the leader of one
// group, picked at random for each fault, and "a follower" a node that does
// not lead that group; whatever a fault does to a node it does to all of
// its groups (the node may lead others too), which is the point.
const (
	faultKillLeader      faultKind = iota // kill -9 the leader, restart it on heal
	faultKillFollower                     // kill -9 a follower, restart it on heal
	faultPauseLeader                      // SIGSTOP the leader, SIGCONT on heal
	faultPauseFollower                    // SIGSTOP a follower, SIGCONT on heal
	faultIsolateLeader                    // cut the leader from both others
	faultIsolateFollower                  // cut a follower from both others: minority and majority
	faultCutLink                          // cut the leader-follower link only: the other follower bridges
	faultRestartAll                       // kill -9 every node, start them all on heal
	faultSkewedLeader                     // hand leadership (of a group it does not lead) to the node whose clock is off
	faultStallLink                        // a silent leader-follower link, held long (stallHold)
	faultReplace                          // kill -9 a node, wipe its data, join a new node, remove the old one
	numFaultKinds
)

func (k faultKind) String() string {
	return [...]string{"kill-leader", "kill-follower", "pause-leader", "pause-follower",
		"isolate-leader", "isolate-follower", "cut-link", "restart-all", "skewed-leader", "stall-link", "replace"}[k]
}

// stallRecovery is how soon after the heal of a stalled link every node
// must serve again: however long the stall, no connection may stay stuck
// behind TCP's retransmission backoff.
const stallRecovery = 2 * time.Second

// faultEvent is one injected fault, for the report.
type faultEvent struct {
	N         int
	Kind      faultKind
	Desc      string
	Start     time.Duration // since the run's start
	Held      time.Duration
	Recovered time.Duration // from heal until every node served again; -1 if never
}

// nemesis injects faults into a cluster, one at a time.
type nemesis struct {
	c      *cluster
	rng    *rand.Rand
	skewed int // the node whose clock is off
	order  []faultKind
	kinds  []faultKind // the kinds to inject (-faults); nil: every kind
}

// parseFaultKind returns the kind a name (as String gives it) names.
func parseFaultKind(name string) (faultKind, bool) {
	for k := range numFaultKinds {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

// nextKind cycles through every kind (or those of -faults) in a shuffled
// order, so that each occurs once in every cycle.
func (n *nemesis) nextKind() faultKind {
	if len(n.order) == 0 {
		n.order = append(n.order, n.kinds...)
		for k := range numFaultKinds {
			if n.kinds == nil {
				n.order = append(n.order, k)
			}
		}
		n.rng.Shuffle(len(n.order), func(i, j int) { n.order[i], n.order[j] = n.order[j], n.order[i] })
	}
	k := n.order[0]
	n.order = n.order[1:]
	return k
}

// follower returns a running node other than leader, at random.
func (n *nemesis) follower(leader *node) *node {
	var fs []*node
	for _, nd := range n.c.nodes {
		if nd != leader && nd.Running() {
			fs = append(fs, nd)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return fs[n.rng.IntN(len(fs))]
}

// mode picks how cut links behave.
func (n *nemesis) mode() cutMode {
	if n.rng.IntN(2) == 0 {
		return cutDrop
	}
	return cutReject
}

// group picks the Raft group whose leader a fault targets: at random with
// several, without drawing from the seed's sequence with one (so that a
// seed of a run with one group replays the same schedule as before groups
// existed).
func (n *nemesis) group() int {
	if n.c.shards == 1 {
		return 0
	}
	return n.rng.IntN(n.c.shards)
}

// inject starts a fault of kind k and returns what it did and how to heal
// it.
func (n *nemesis) inject(ctx context.Context, k faultKind) (string, func() error, error) {
	g := n.group()
	leader, err := n.c.Leader(ctx, g, 10*time.Second)
	if err != nil {
		return "", nil, err
	}
	if k == faultSkewedLeader {
		return n.skewedLeader(ctx, g, leader)
	}
	if k == faultReplace {
		return n.replace(ctx, g, leader)
	}
	desc, heal, err := n.injectAt(k, leader)
	if err == nil && n.c.shards > 1 {
		desc += fmt.Sprintf(" [group %d led by %s]", g, leader.ID)
	}
	return desc, heal, err
}

// injectAt starts a fault of kind k (not faultSkewedLeader) around a
// group's leader.
func (n *nemesis) injectAt(k faultKind, leader *node) (string, func() error, error) {
	c := n.c
	switch k {
	case faultKillLeader, faultKillFollower:
		victim := leader
		if k == faultKillFollower {
			if victim = n.follower(leader); victim == nil {
				return "", nil, fmt.Errorf("no follower to kill")
			}
		}
		c.Kill(victim)
		return "kill -9 " + victim.ID, func() error { return c.Start(victim) }, nil
	case faultPauseLeader, faultPauseFollower:
		victim := leader
		if k == faultPauseFollower {
			if victim = n.follower(leader); victim == nil {
				return "", nil, fmt.Errorf("no follower to pause")
			}
		}
		if err := c.Signal(victim, syscall.SIGSTOP); err != nil {
			return "", nil, err
		}
		return "SIGSTOP " + victim.ID, func() error { return c.Signal(victim, syscall.SIGCONT) }, nil
	case faultIsolateLeader, faultIsolateFollower:
		victim := leader
		if k == faultIsolateFollower {
			if victim = n.follower(leader); victim == nil {
				return "", nil, fmt.Errorf("no follower to isolate")
			}
		}
		m := n.mode()
		if err := c.Isolate(victim.Index, m); err != nil {
			return "", nil, errors.Join(err, c.Heal())
		}
		return fmt.Sprintf("isolate %s (%s)", victim.ID, m), c.Heal, nil
	case faultCutLink:
		f := n.follower(leader)
		if f == nil {
			return "", nil, fmt.Errorf("no follower to cut off")
		}
		m := n.mode()
		if err := c.Cut(leader.Index, f.Index, m); err != nil {
			return "", nil, errors.Join(err, c.Heal())
		}
		return fmt.Sprintf("cut link %s-%s (%s)", leader.ID, f.ID, m), c.Heal, nil
	case faultStallLink:
		f := n.follower(leader)
		if f == nil {
			return "", nil, fmt.Errorf("no follower to stall")
		}
		if err := c.Stall(leader.Index, f.Index); err != nil {
			return "", nil, errors.Join(err, c.Heal())
		}
		return fmt.Sprintf("stall link %s-%s", leader.ID, f.ID), c.Heal, nil
	case faultRestartAll:
		for _, i := range n.rng.Perm(len(c.nodes)) {
			c.Kill(c.nodes[i])
		}
		return "kill -9 every node, then start them all", func() error {
			for _, nd := range c.nodes {
				if err := c.Start(nd); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
	return "", nil, fmt.Errorf("unknown fault kind %d", k)
}

// skewedLeader hands the leadership of group g (led by leader), or of the
// first group after it that the node whose clock is off does not lead, to
// that node. With several groups that node leads one already (the
// balancer gives each node one), and the balancer hands the transferred
// group back to its preferred member a second or so later: two leader
// changes, the first onto a skewed clock.
func (n *nemesis) skewedLeader(ctx context.Context, g int, leader *node) (string, func() error, error) {
	c := n.c
	noop := func() error { return nil }
	target := c.nodes[n.skewed]
	for i := 1; target == leader && i < c.shards; i++ {
		next := (g + 1) % c.shards
		l, err := c.Leader(ctx, next, 10*time.Second)
		if err != nil {
			return "", nil, err
		}
		g, leader = next, l
	}
	if target == leader {
		return fmt.Sprintf("%s (clock %+v) leads already", target.ID, c.skew[target.Index]), noop, nil
	}
	group := ""
	args := []string{"RAFT.TRANSFER", target.ID}
	if c.shards > 1 {
		group = fmt.Sprintf(" of group %d", g)
		args = append(args, "GROUP", strconv.Itoa(g))
	}
	r, err := command(leader.RESP, 5*time.Second, args...)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	if r.Error() != "" {
		return "", nil, fmt.Errorf("%s: %s", strings.Join(args, " "), r.Error())
	}
	return fmt.Sprintf("leadership%s %s -> %s (clock %+v)", group, leader.ID, target.ID, c.skew[target.Index]), noop, nil
}

// replace replaces a machine, as an operator would (docs/operations.md,
// "Replacing a machine"): a node (group g's leader or a follower, at
// random) is killed with SIGKILL and loses its data dir; a new node, with a
// new ID, starts empty in its place with --no-bootstrap; RAFT.JOIN for it
// goes to another node (which forwards each group's step to that group's
// leader), then RAFT.REMOVE of the dead one to another. Nothing is left
// to heal: any failure is returned, and the run counts it as a violation.
func (n *nemesis) replace(ctx context.Context, g int, leader *node) (string, func() error, error) {
	c := n.c
	noop := func() error { return nil }
	victim := leader
	if n.rng.IntN(2) == 0 {
		if victim = n.follower(leader); victim == nil {
			return "", nil, fmt.Errorf("no follower to replace")
		}
	}
	c.Kill(victim)
	old, err := c.Replace(victim)
	if err != nil {
		return "", nil, err
	}
	if err := c.Start(victim); err != nil {
		return "", nil, err
	}
	// It listens once its Raft and forward listeners are bound (and
	// answers PING with LOADING until it is joined and serves).
	if err := testkit.PollContext(ctx, 10*time.Second, 20*time.Millisecond, func() error {
		if r, err := command(victim.RESP, time.Second, "PING"); err != nil || (r.Error() != "" && !strings.HasPrefix(r.Error(), "LOADING")) {
			return fmt.Errorf("the replacement %s never answered PING", victim.ID)
		}
		return nil
	}); err != nil {
		return "", nil, err
	}
	desc := fmt.Sprintf("replace %s by %s:", old, victim.ID)
	for _, step := range [][]string{{"RAFT.JOIN", victim.ID, victim.Raft}, {"RAFT.REMOVE", old}} {
		via := n.follower(victim)
		if via == nil {
			return "", nil, fmt.Errorf("%s no node to send %s to", desc, step[0])
		}
		start := time.Now()
		r, err := command(via.RESP, 2*time.Minute, step...)
		if err == nil && r.Error() != "" {
			err = errors.New(r.Error())
		}
		if err != nil {
			return "", nil, fmt.Errorf("%s %s sent to %s: %w", desc, strings.Join(step, " "), via.ID, err)
		}
		desc += fmt.Sprintf(" %s via %s (%s)", strings.ToLower(step[0]), via.ID, time.Since(start).Round(time.Millisecond))
	}
	return desc, noop, nil
}
