package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/freeport"
	"github.com/sluice-rl/sluice/internal/testcerts"
)

// reserveAddr listens on a free 127.0.0.1 port and returns its address
// with the listener, which the caller closes just before it binds the
// address itself. While the listener is open no outgoing connection takes
// the port as its source port: with ports picked and let go at once, a node
// dialling its peers could take the port of one not yet started ("bind:
// address already in use").
func reserveAddr(t testing.TB) (string, net.Listener) {
	t.Helper()
	ln, err := freeport.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), ln
}

// TestTLSCluster: three nodes over real TCP with mutual TLS elect a leader,
// replicate, and forward; a peer without a certificate from the cluster's
// CA can speak to neither the Raft nor the forward port.
func TestTLSCluster(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir())
	peerTLS, err := PeerTLSConfig(certs.Cert, certs.Key, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	th := startHosts(t, n, hostsOpt{tcp: true, config: func(_ int, c *Config) {
		c.TLS = peerTLS
		c.ClusterTimeout = 2 * time.Second
	}})
	nodes := make([]*Node, n)
	for i, h := range th.hosts {
		nodes[i] = h.nodes[0]
	}
	leader, follower := -1, -1
	for i, node := range nodes {
		if k := node.route().kind; k == routeLocal {
			leader = i
		} else if follower < 0 {
			follower = i
		}
	}
	if leader < 0 || follower < 0 {
		t.Fatalf("leader %d, follower %d", leader, follower)
	}
	// A follower forwards over TLS; the leader sees the result.
	rule := engine.Rule{Kind: engine.KindToken, Limit: 2, Period: int64(time.Minute)}
	for i, wantAllowed := range []bool{true, true, false} {
		res := make([]engine.Result, 1)
		err := nodes[follower].Execute(context.Background(), []engine.Op{{Code: engine.OpDecide, Key: []byte("k"), Rule: rule, Cost: 1}}, res)
		if err != nil || res[0].Allowed != wantAllowed {
			t.Fatalf("call %d through the follower: %+v %v", i+1, res[0], err)
		}
	}
	res := make([]engine.Result, 1)
	if err := nodes[leader].Execute(context.Background(), []engine.Op{{Code: engine.OpPeek, Key: []byte("k")}}, res); err != nil || res[0].Remaining != 0 {
		t.Fatalf("peek on the leader: %+v %v", res[0], err)
	}
	waitFor(t, 5*time.Second, func() error {
		for i, node := range nodes {
			if err := node.Ready(); err != nil {
				return fmt.Errorf("node %d: %w", i+1, err)
			}
		}
		return nil
	})

	// Metrics: Raft's state, and the follower's forwarding.
	mfs := gatherNode(t, nodes[follower])
	if v := metricValue(mfs, "sluice_raft_state", "state", "follower"); v != 1 {
		t.Errorf("follower's sluice_raft_state{state=follower} = %v", v)
	}
	if v := metricValue(mfs, "sluice_forwarded_batches_total"); v != 3 {
		t.Errorf("sluice_forwarded_batches_total = %v, want 3", v)
	}
	if v := metricValue(mfs, "sluice_raft_term"); v < 1 {
		t.Errorf("sluice_raft_term = %v", v)
	}
	lm := gatherNode(t, nodes[leader])
	if v := metricValue(lm, "sluice_raft_state", "state", "leader"); v != 1 {
		t.Errorf("leader's sluice_raft_state{state=leader} = %v", v)
	}
	if v := metricValue(lm, "sluice_raft_apply_duration_seconds"); v < 1 {
		t.Errorf("no apply observed: %v", v)
	}
	if v := metricValue(lm, "sluice_raft_commit_index"); v < 3 {
		t.Errorf("sluice_raft_commit_index = %v", v)
	}
	// Every entry the leader committed had its commit and its hold in the
	// batcher timed; a follower times none.
	entries := metricValue(lm, "sluice_raft_committed_entries_total")
	if v := metricValue(lm, "sluice_raft_commit_duration_seconds"); entries < 1 || v != entries {
		t.Errorf("leader: %v commit times for %v committed entries", v, entries)
	}
	if v := metricValue(lm, "sluice_batch_hold_duration_seconds"); v < entries {
		t.Errorf("leader: %v hold times for %v committed entries", v, entries)
	}
	for _, name := range []string{"sluice_raft_commit_duration_seconds", "sluice_batch_hold_duration_seconds"} {
		if v := metricValue(mfs, name); v != 0 {
			t.Errorf("follower's %s has %v observations", name, v)
		}
	}

	// Strangers: a certificate from another CA, no certificate, no TLS.
	foreign := testcerts.KeyPair(t, certs.ForeignCert, certs.ForeignKey)
	roots := testcerts.Pool(t, certs.CA)
	strangers := map[string]func(addr string) (net.Conn, error){
		"foreign certificate": func(addr string) (net.Conn, error) {
			// Presented whatever the server asks for (Go would otherwise
			// send no certificate the server's CA did not sign).
			return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots,
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }})
		},
		"no certificate": func(addr string) (net.Conn, error) {
			return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
		},
		"plain TCP": func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) },
	}
	// The same words from a member are answered.
	member := testcerts.KeyPair(t, certs.Cert, certs.Key)
	if err := speak(func(addr string) (net.Conn, error) {
		return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{member}})
	}, th.cfgs[leader].ForwardAddr); err != nil {
		t.Fatalf("a member on the forward port: %v", err)
	}
	for name, dial := range strangers {
		for port, addr := range map[string]string{"raft": th.cfgs[leader].RaftAddr, "forward": th.cfgs[leader].ForwardAddr} {
			if err := speak(dial, addr); err == nil {
				t.Errorf("%s on the %s port: the leader answered", name, port)
			}
		}
	}
	// And the cluster still works.
	if err := nodes[follower].Execute(context.Background(), []engine.Op{{Code: engine.OpPeek, Key: []byte("k")}}, res); err != nil {
		t.Fatal(err)
	}
	// The version poll goes over the peer TLS too: every node says it
	// supports the version, and the leader raises it.
	waitFor(t, 10*time.Second, func() error {
		for i, node := range nodes {
			if v := node.ClusterVersion(); v != SupportedVersion {
				return fmt.Errorf("node %d: cluster version %d", i+1, v)
			}
		}
		return nil
	})
	if v := metricValue(gatherNode(t, nodes[follower]), "sluice_cluster_version"); v != float64(SupportedVersion) {
		t.Errorf("sluice_cluster_version = %v", v)
	}
}

// forwardRequest is a follower's hello and one well-formed request (TIME).
func forwardRequest() []byte {
	p := binary.AppendUvarint(nil, 1) // id
	p = binary.AppendUvarint(p, 1000) // timeout, ms
	p = append(p, make([]byte, len(codec.BatchID{}))...)
	p = codec.AppendOps(p, []engine.Op{{Code: engine.OpTime}})
	return append([]byte(forward.Hello), peer.Frame(p)...)
}

// speak connects, says what a follower would (bytes a Raft listener must
// not act on either) and returns nil if any reply comes back.
func speak(dial func(string) (net.Conn, error), addr string) error {
	c, err := dial(addr)
	if err != nil {
		return err // refused during the handshake
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(forwardRequest()); err != nil {
		return err
	}
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("no reply, connection left open")
	}
	return err
}

func gatherNode(t *testing.T, n *Node) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(n.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func metricValue(mfs map[string]*dto.MetricFamily, name string, label ...string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
	for _, m := range mf.GetMetric() {
		if len(label) == 2 {
			ok := false
			for _, lp := range m.GetLabel() {
				ok = ok || lp.GetName() == label[0] && lp.GetValue() == label[1]
			}
			if !ok {
				continue
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}
