package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testkit/proccluster"
	"github.com/sluice-rl/sluice/persistence"
)

// runSluice runs the sluice binary with args and returns its output.
func runSluice(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// TestBackupRestoreProcesses: `sluice backup` of a live three-node cluster
// with three groups under load from clients on every node; `sluice inspect`
// describes the archive; a corrupted copy is refused by inspect and
// restore; `sluice restore` makes the data dirs of a new three-node
// cluster, whose DEBUG DIGEST on every node is the one recorded at the
// backup, which holds every write acknowledged before the backup began,
// and which serves.
func TestBackupRestoreProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	c := newBalancedShardCluster(t, false)
	ctx := context.Background()
	const window = "30d" // no window ends during the test: the state stays
	// A write acknowledged before the backup starts must be in it.
	if _, err := c.client(c.nodes[1]).Do(ctx, "RL.FIXED", "marker", "1000000", window, "COST", "7").Result(); err != nil {
		t.Fatal(err)
	}

	// Load: clients on every node, on keys of every group.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var acked, failed atomic.Int64
	for i, p := range c.nodes {
		r := c.client(p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; loadCtx.Err() == nil; j++ {
				key := "load:" + strconv.Itoa(i) + ":" + strconv.Itoa(j%500)
				if _, err := r.Do(loadCtx, "RL.FIXED", key, "1000000", window).Result(); err != nil {
					if loadCtx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				acked.Add(1)
			}
		}()
	}
	// Up to 20s for 300 acknowledged calls; the backup runs either way.
	_ = testkit.Poll(20*time.Second, 20*time.Millisecond, func() error {
		if n := acked.Load(); n < 300 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})
	archive := filepath.Join(t.TempDir(), "cluster.bk")
	start := time.Now()
	out, err := runSluice(t, "backup", "--addr", c.nodes[2].RESP, "--out", archive)
	took := time.Since(start)
	before := acked.Load()
	time.Sleep(200 * time.Millisecond) // the load goes on after the backup
	stopLoad()
	wg.Wait()
	if err != nil {
		c.dumpLogs()
		t.Fatalf("sluice backup: %v\n%s", err, out)
	}
	t.Logf("backup in %s under load (%d commands acknowledged by then, %d in all, %d failed): %s",
		took.Round(time.Millisecond), before, acked.Load(), failed.Load(), strings.TrimSpace(out))
	if failed.Load() != 0 {
		t.Errorf("%d commands failed during the backup", failed.Load())
	}

	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	info, groups, err := persistence.ReadArchive(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if info.Groups != shardCount || len(groups) != shardCount || info.Keys < 2 {
		t.Fatalf("archive: %+v with %d groups", info, len(groups))
	}
	wantDigest := hex.EncodeToString(info.Digest[:]) + " " + strconv.FormatInt(info.Keys, 10)

	out, err = runSluice(t, "inspect", archive)
	if err != nil {
		t.Fatalf("sluice inspect: %v\n%s", err, out)
	}
	for _, want := range []string{"groups: 3\n", "digest: " + wantDigest + "\n", "group 0: applied_index=",
		"group 2: applied_index=", "keys: " + strconv.FormatInt(info.Keys, 10) + "\n", "verified: "} {
		if !strings.Contains(out, want) {
			t.Errorf("sluice inspect's output lacks %q:\n%s", want, out)
		}
	}

	// A corrupted archive is refused, by inspect and by restore.
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 0x20
	badPath := filepath.Join(t.TempDir(), "bad.bk")
	if err := os.WriteFile(badPath, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runSluice(t, "inspect", badPath); err == nil || !strings.Contains(out, "is refused") || !strings.Contains(out, "corrupt") {
		t.Errorf("inspect of a corrupted archive: %v\n%s", err, out)
	}
	badDir := filepath.Join(t.TempDir(), "bad")
	if out, err := runSluice(t, "restore", "--in", badPath, "--data-dir", badDir, "--id", "n1", "--peers", "n1=127.0.0.1:1"); err == nil ||
		!strings.Contains(out, "is refused") {
		t.Errorf("restore of a corrupted archive: %v\n%s", err, out)
	}
	if _, err := os.Stat(badDir); err == nil {
		t.Errorf("a refused restore left %s behind", badDir)
	}

	// Restore into a new cluster while the old one still runs: new data
	// dirs, the same ids, and for the third node the addresses of the old
	// cluster's third node, which is stopped first: the old leader keeps
	// trying to replicate to that address, and the restored node must
	// refuse it (the new cluster's identity).
	c.kill(c.nodes[2])
	nc := layoutTestCluster(t, proccluster.Config{Nodes: 3, Setup: func(ns []*proc) {
		ns[2].RESP, ns[2].Raft, ns[2].Fwd = c.nodes[2].RESP, c.nodes[2].Raft, c.nodes[2].Fwd
	}})
	for _, nd := range nc.nodes {
		out, err := runSluice(t, "restore", "--in", archive, "--data-dir", nd.Dir, "--id", nd.ID, "--peers", nc.Peers)
		if err != nil {
			t.Fatalf("sluice restore: %v\n%s", err, out)
		}
		nd.Extra = []string{"--shards", strconv.Itoa(shardCount)}
	}
	if out, err := runSluice(t, "restore", "--in", archive, "--data-dir", nc.nodes[0].Dir, "--id", "n1", "--peers", nc.Peers); err == nil ||
		!strings.Contains(out, "not empty") {
		t.Errorf("restore over a data dir that is not empty: %v\n%s", err, out)
	}
	nc.startAll()
	// Before any command goes through the new cluster's log (which would
	// move its clock), every node holds exactly the backup's state.
	for _, p := range nc.nodes {
		nc.settle(30*time.Second, 50*time.Millisecond, "restored digest of "+p.ID, func() string {
			got, err := nc.client(p).Do(ctx, "DEBUG", "DIGEST").Text()
			if err != nil {
				return err.Error()
			}
			if got != wantDigest {
				return fmt.Sprintf("DEBUG DIGEST %s, the backup's %s", got, wantDigest)
			}
			return ""
		})
	}
	nc.waitServing(nc.nodes...)
	for _, p := range nc.nodes {
		st, err := nc.raftStatus(p, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, old := range c.nodes[:2] {
			if strings.Contains(st["members"], old.Raft) {
				t.Errorf("%s: a restored node's members name the old cluster's %s: %s", p.ID, old.Raft, st["members"])
			}
		}
	}
	nc.settle(20*time.Second, 100*time.Millisecond, "the old cluster refused", func() string {
		b, _ := os.ReadFile(nc.nodes[2].Dir + ".log")
		if !strings.Contains(string(b), "a node of another cluster") {
			return "the restored node on the old node's address logged no refused stream"
		}
		return ""
	})
	ids := map[string]bool{}
	for _, p := range nc.nodes {
		id, err := os.ReadFile(filepath.Join(p.Dir, "cluster-id"))
		if err != nil {
			t.Fatal(err)
		}
		ids[string(id)] = true
	}
	if len(ids) != 1 {
		t.Errorf("the restored nodes have different cluster identities: %v", ids)
	}
	// The old cluster's nodes still hold the state they had, with the
	// writes after the backup: not the restored cluster's.
	if got, err := c.client(c.nodes[0]).Do(ctx, "DEBUG", "DIGEST").Text(); err != nil || got == wantDigest {
		t.Errorf("the old cluster's digest %s (%v) is the backup's: the load after it is missing", got, err)
	}
	// The write acknowledged before the backup is there, once.
	res, err := nc.client(nc.nodes[0]).Do(ctx, "RL.FIXED", "marker", "1000000", window, "COST", "0").Int64Slice()
	if err != nil || len(res) < 3 || res[2] != 1000000-7 {
		t.Fatalf("marker after the restore: %v %v, want remaining %d", res, err, 1000000-7)
	}
	n, err := nc.client(nc.nodes[1]).Do(ctx, "DBSIZE").Int64()
	if err != nil || n != info.Keys {
		t.Errorf("DBSIZE of the restored cluster %d (%v), the backup's %d keys", n, err, info.Keys)
	}
}

// TestBackupAuthTLS: sluice backup authenticates and speaks TLS as
// redis-cli does (-a, --user/--pass, --tls --cacert --cert --key), and
// fails clearly without the password.
func TestBackupAuthTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	certs := testcerts.Generate(t, t.TempDir())
	a, tlsAddr := freeSoloAddrs(t), freeAddr(t)
	addr := a.addr
	n := startSolo(t, a, filepath.Join(t.TempDir(), "data"), "--requirepass", "s3cret",
		"--tls-addr", tlsAddr, "--tls-cert-file", certs.Cert, "--tls-key-file", certs.Key, "--tls-ca-cert-file", certs.CA)
	r := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret", Protocol: 2, MaxRetries: -1})
	defer r.Close()
	if err := testkit.Poll(20*time.Second, 50*time.Millisecond, func() error {
		return r.Do(context.Background(), "RL.FIXED", "k", "10", "30d").Err()
	}); err != nil {
		t.Fatalf("node not serving: %v; log:\n%s", err, n.logText())
	}
	dir := t.TempDir()
	if out, err := runSluice(t, "backup", "--addr", addr, "--out", filepath.Join(dir, "x.bk")); err == nil || !strings.Contains(out, "NOAUTH") {
		t.Errorf("backup without the password: %v\n%s", err, out)
	}
	if out, err := runSluice(t, "backup", "--addr", addr, "--out", filepath.Join(dir, "a.bk"), "-a", "s3cret"); err != nil {
		t.Fatalf("backup with -a: %v\n%s", err, out)
	}
	out, err := runSluice(t, "backup", "--addr", tlsAddr, "--out", filepath.Join(dir, "t.bk"), "--user", "default", "--pass", "s3cret",
		"--tls", "--cacert", certs.CA, "--cert", certs.ClientCert, "--key", certs.ClientKey)
	if err != nil {
		t.Fatalf("backup over TLS: %v\n%s", err, out)
	}
	if out, err := runSluice(t, "inspect", filepath.Join(dir, "t.bk")); err != nil || !strings.Contains(out, "groups: 1\n") || !strings.Contains(out, "keys: 1\n") {
		t.Errorf("inspect: %v\n%s", err, out)
	}
}

// TestRestoredClusterJoin: a node started empty with a copy of a restored
// cluster's identity joins it (RAFT.JOIN) and gets its state.
func TestRestoredClusterJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx := context.Background()
	src := startSolo(t, freeSoloAddrs(t), filepath.Join(t.TempDir(), "src"))
	src.waitServing(t)
	rs := redis.NewClient(&redis.Options{Addr: src.addr, Protocol: 2, MaxRetries: -1})
	defer rs.Close()
	for i := range 20 {
		if err := rs.Do(ctx, "RL.FIXED", "k"+strconv.Itoa(i), "100", "30d").Err(); err != nil {
			t.Fatal(err)
		}
	}
	archive := filepath.Join(t.TempDir(), "a.bk")
	if out, err := runSluice(t, "backup", "--addr", src.addr, "--out", archive); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	raft1, raft2 := freeAddr(t), freeAddr(t)
	dir1, dir2 := filepath.Join(t.TempDir(), "r1"), filepath.Join(t.TempDir(), "r2")
	if out, err := runSluice(t, "restore", "--in", archive, "--data-dir", dir1, "--id", "r1", "--peers", "r1="+raft1); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	r1 := startSolo(t, soloAddrs{addr: freeAddr(t)}, dir1, "--id", "r1", "--raft-addr", raft1, "--forward-addr", freeAddr(t), "--peers", "r1="+raft1)
	r1.waitServing(t)
	id, err := os.ReadFile(filepath.Join(dir1, "cluster-id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir2, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir2, "cluster-id"), id, 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := startSolo(t, soloAddrs{addr: freeAddr(t)}, dir2, "--id", "r2", "--raft-addr", raft2, "--forward-addr", freeAddr(t), "--no-bootstrap")
	// RAFT.JOIN checks that the address accepts a connection: wait until
	// the new node listens.
	if err := testkit.Poll(10*time.Second, 20*time.Millisecond, func() error {
		c, err := net.DialTimeout("tcp", raft2, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("the new node's raft address: %v", err)
	}
	c1 := redis.NewClient(&redis.Options{Addr: r1.addr, Protocol: 2, MaxRetries: -1})
	defer c1.Close()
	if err := c1.Do(ctx, "RAFT.JOIN", "r2", raft2).Err(); err != nil {
		t.Fatalf("RAFT.JOIN: %v", err)
	}
	c2 := redis.NewClient(&redis.Options{Addr: r2.addr, Protocol: 2, MaxRetries: -1})
	defer c2.Close()
	if err := testkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
		want, err1 := c1.Do(ctx, "DEBUG", "DIGEST").Text()
		got, err2 := c2.Do(ctx, "DEBUG", "DIGEST").Text()
		if err1 == nil && err2 == nil && got == want && !strings.HasSuffix(got, " 0") {
			return nil
		}
		return fmt.Errorf("the joined node's digest %s (%v), the member's %s (%v)", got, err2, want, err1)
	}); err != nil {
		t.Fatalf("%v; its log:\n%s", err, r2.logText())
	}
}
