package proccluster

import (
	"errors"
	"strings"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// The links between the nodes (Config.Proxies): a LinkProxy in front of
// every peer's Raft and forward ports, each node dialing them through its
// --debug-dial-map, and the partitions made of them (Cut, Stall, Isolate,
// Heal).

// makeProxies puts a proxy in front of every peer's Raft and forward
// ports (and spares) for every node, and gives each node its
// --debug-dial-map.
func (c *Cluster) makeProxies() error {
	for _, from := range c.Nodes {
		var m []string
		for _, to := range c.Nodes {
			if from == to {
				continue
			}
			targets := []string{to.Raft, to.Fwd}
			if c.cfg.Spares {
				targets = append(targets, to.spare[0], to.spare[1])
			}
			var pair []*testkit.LinkProxy
			for _, target := range targets {
				p, err := testkit.NewLinkProxy(target, c.log)
				if err != nil {
					return err
				}
				pair = append(pair, p)
				m = append(m, target+"="+p.Addr())
			}
			c.proxies[[2]int{from.Index, to.Index}] = pair
		}
		from.dialMap = strings.Join(m, ",")
	}
	return nil
}

// proxiesTo returns the proxies in front of n.
func (c *Cluster) proxiesTo(n *Node) []*testkit.LinkProxy {
	var ps []*testkit.LinkProxy
	for key, pair := range c.proxies {
		if key[1] == n.Index {
			ps = append(ps, pair...)
		}
	}
	return ps
}

// Cut sets the links between nodes a and b (by Index), both ways, to mode.
func (c *Cluster) Cut(a, b int, mode testkit.LinkMode) error {
	var errs []error
	for _, key := range [][2]int{{a, b}, {b, a}} {
		for _, p := range c.proxies[key] {
			errs = append(errs, p.Set(mode))
		}
	}
	return errors.Join(errs...)
}

// Stall silences the link between nodes a and b, both ways, for a long
// while: Raft's proxies drop (their connections resume on heal: a real
// Raft connection stuck in backoff is dropped by TCP_USER_TIMEOUT within a
// second and redialed, which a proxy cannot show the kernel), forwarding's
// stall (their connections stay stuck after the heal, as TCP leaves them
// after a long cut: only new ones pass).
func (c *Cluster) Stall(a, b int) error {
	var errs []error
	for _, key := range [][2]int{{a, b}, {b, a}} {
		for i, p := range c.proxies[key] {
			mode := testkit.LinkDrop
			if i%2 == 1 { // forward, and spare forward
				mode = testkit.LinkStall
			}
			errs = append(errs, p.Set(mode))
		}
	}
	return errors.Join(errs...)
}

// Isolate cuts every link of node i with mode; LinkStall stalls them as
// Stall does.
func (c *Cluster) Isolate(i int, mode testkit.LinkMode) error {
	var errs []error
	for j := range c.Nodes {
		switch {
		case j == i:
		case mode == testkit.LinkStall:
			errs = append(errs, c.Stall(i, j))
		default:
			errs = append(errs, c.Cut(i, j, mode))
		}
	}
	return errors.Join(errs...)
}

// Heal brings every link up.
func (c *Cluster) Heal() error {
	var errs []error
	for _, ps := range c.proxies {
		for _, p := range ps {
			errs = append(errs, p.Set(testkit.LinkUp))
		}
	}
	return errors.Join(errs...)
}
