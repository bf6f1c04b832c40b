package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// The disk fault tests (docs/operations.md, "Disk faults"). The full-disk
// ones mount a size-limited tmpfs, so they need root (CI runs as root);
// elsewhere they are skipped.

// mountTmpfs mounts a tmpfs of size (mount's syntax: "100m") on a new
// directory and unmounts it when the test ends; it skips the test when
// that is not possible.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// remount changes a mounted tmpfs's options ("size=300m", "ro").
func remount(t *testing.T, dir, opts string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+opts, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s with %s: %v: %s", dir, opts, err, out)
	}
}

// soloAddrs are the addresses of a single durable node: RESP, and the Raft
// and forward ports it also listens on. A test picks them free and keeps
// them across restarts: left out, the Raft and forward ports default to the
// RESP port + 1000 and + 2000, which nothing checks free, and a node that
// finds one taken exits after its RESP port accepted (a reset connection).
type soloAddrs struct{ addr, raft, fwd string }

// freeSoloAddrs picks the three addresses of a single node.
func freeSoloAddrs(t *testing.T) soloAddrs {
	return soloAddrs{addr: freeAddr(t), raft: freeAddr(t), fwd: freeAddr(t)}
}

// flags are the node's address flags (the Raft and forward ones when set).
func (a soloAddrs) flags() []string {
	f := []string{"--addr", a.addr}
	if a.raft != "" {
		f = append(f, "--raft-addr", a.raft, "--forward-addr", a.fwd)
	}
	return f
}

// soloNode is one sluice process on its own (a single durable node).
type soloNode struct {
	soloAddrs
	dir, logPath string
	run          *sluiceproc.Process
}

// startSolo starts a single durable node on dir with extra flags; a
// restart passes the same addresses (n.soloAddrs).
func startSolo(t *testing.T, a soloAddrs, dir string, extra ...string) *soloNode {
	t.Helper()
	n := &soloNode{soloAddrs: a, dir: dir, logPath: filepath.Join(t.TempDir(), "node.log")}
	logf, err := os.Create(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	args := append(append(a.flags(), "--data-dir", dir, "--enable-debug-command", "--cluster-timeout", "2s", "--log-level", "warn"), extra...)
	if n.run, err = sluiceproc.Start("solo", binary, args, sluiceproc.Options{Output: logf}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.run.Kill() })
	return n
}

func (n *soloNode) logText() string {
	b, _ := os.ReadFile(n.logPath)
	return string(b)
}

// waitServing polls the node until it serves.
func (n *soloNode) waitServing(t *testing.T) {
	t.Helper()
	if err := testkit.Poll(30*time.Second, 50*time.Millisecond, func() error {
		return sluiceproc.Serving(n.addr, 2*time.Second)
	}); err != nil {
		t.Fatalf("node on %s not serving: %v; log:\n%s", n.addr, err, n.logText())
	}
}

// fillKey is the i-th key the fill writes: long, so that the log grows
// fast.
func fillKey(i int) string { return fmt.Sprintf("%0900d", i) }

// fill writes new keys in pipelines of 100 through r until a command
// fails, more than maxKeys were written, or stop says so; it returns how
// many were acknowledged and the first error.
func fill(t *testing.T, r *redis.Client, from, maxKeys int, stop func() bool) (int, error) {
	t.Helper()
	ctx := context.Background()
	acked := 0
	for i := from; i < from+maxKeys; i += 100 {
		if stop != nil && stop() {
			return acked, nil
		}
		p := r.Pipeline()
		cmds := make([]*redis.Cmd, 100)
		for j := range cmds {
			cmds[j] = p.Do(ctx, "RL.FIXED", fillKey(i+j), "1000000", "30d")
		}
		_, _ = p.Exec(ctx)
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return acked, err
			}
			acked++
		}
	}
	return acked, nil
}

// TestDiskFullSingleNode: a single durable node on a 100 MB file system
// fed new keys until it is full answers the write that needs the log with
// MISCONF within a second, still answers reads, and once the file system
// grows serves again by itself within seconds, with every acknowledged key
// there.
func TestDiskFullSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	for _, store := range []string{"wal", "bolt"} {
		t.Run(store, func(t *testing.T) { testDiskFullSingleNode(t, store) })
	}
}

func testDiskFullSingleNode(t *testing.T, store string) {
	mnt := mountTmpfs(t, "100m")
	n := startSolo(t, freeSoloAddrs(t), filepath.Join(mnt, "data"), "--raft-log", store)
	n.waitServing(t)
	r := redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, MaxRetries: -1, ReadTimeout: 10 * time.Second, PoolSize: 2})
	defer r.Close()
	ctx := context.Background()

	start := time.Now()
	acked, err := fill(t, r, 0, 400_000, nil)
	if err == nil {
		t.Fatalf("%d keys written to a 100 MB file system and no error", acked)
	}
	t.Logf("full after %d keys in %s: %v", acked, time.Since(start).Round(time.Millisecond), err)
	if !strings.HasPrefix(err.Error(), "MISCONF ") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("the write that found the disk full: %v, want MISCONF naming the cause", err)
	}
	// A write now fails at once with MISCONF.
	t0 := time.Now()
	err = r.Do(ctx, "RL.FIXED", "after-full", "10", "30d").Err()
	took := time.Since(t0)
	if err == nil || !strings.HasPrefix(err.Error(), "MISCONF ") || took > time.Second {
		t.Fatalf("a write on the full disk: %v after %s, want MISCONF within a second", err, took)
	}
	t.Logf("a write on the full disk: %s after %s", err, took.Round(time.Millisecond))
	// Reads are answered from the state.
	for _, i := range []int{0, acked - 1} {
		if got, err := r.Exists(ctx, fillKey(i)).Result(); err != nil || got != 1 {
			t.Fatalf("EXISTS of acknowledged key %d on the full disk: %d, %v", i, got, err)
		}
	}
	if got, err := r.DBSize(ctx).Result(); err != nil || got != int64(acked) {
		t.Fatalf("DBSIZE on the full disk: %d, %v; want %d", got, err, acked)
	}

	// Space returns: the node serves again by itself.
	remount(t, mnt, "size=400m")
	t0 = time.Now()
	if err := testkit.Poll(15*time.Second, 100*time.Millisecond, func() error {
		return r.Do(ctx, "RL.FIXED", "after-grow", "10", "30d").Err()
	}); err != nil {
		t.Fatalf("still failing %s after the file system grew: %v; log:\n%s", time.Since(t0), err, n.logText())
	}
	t.Logf("serving again %s after the file system grew", time.Since(t0).Round(time.Millisecond))
	if got, err := r.DBSize(ctx).Result(); err != nil || got != int64(acked)+1 {
		t.Fatalf("DBSIZE after the recovery: %d, %v; want the %d acknowledged keys and one more", got, err, acked)
	}
	more, err := fill(t, r, acked+1000, 2000, nil)
	if err != nil {
		t.Fatalf("writes after the recovery: %d, then %v", more, err)
	}
	if !strings.Contains(n.logText(), "the raft log can be written again") {
		t.Errorf("the log does not say the node recovered:\n%s", n.logText())
	}
	// And a restart keeps it all.
	if err := n.run.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	n = startSolo(t, n.soloAddrs, n.dir, "--raft-log", store)
	n.waitServing(t)
	r2 := redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, MaxRetries: -1})
	defer r2.Close()
	if got, err := r2.DBSize(ctx).Result(); err != nil || got != int64(acked+1+more) {
		t.Fatalf("DBSIZE after a restart: %d, %v; want %d", got, err, acked+1+more)
	}
}

// TestDiskFullFollower: one follower of three on a file system that
// fills: the others keep serving every write, and once the file system
// grows the follower catches up by itself.
func TestDiskFullFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	mnt := mountTmpfs(t, "100m")
	c := newTestClusterWith(t, 3, func(nodes []*proc) { nodes[2].Dir = filepath.Join(mnt, "n3") })
	c.waitServing(c.nodes...)
	small := c.nodes[2]
	if leader := c.leader(); leader == small {
		if err := c.client(small).Do(context.Background(), "RAFT.TRANSFER", c.nodes[0].ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
	leader := c.leader()
	if leader == small {
		t.Fatal("the small node still leads")
	}
	faulted := func() bool {
		b, _ := os.ReadFile(small.Dir + ".log")
		return strings.Contains(string(b), "the raft log cannot be written")
	}
	r := c.client(leader)
	acked, err := fill(t, r, 0, 400_000, faulted)
	if err != nil || !faulted() {
		c.dumpLogs()
		t.Fatalf("filling through the leader: %d acknowledged, then %v (follower faulted: %v)", acked, err, faulted())
	}
	// The others keep serving while the follower cannot write.
	more, err := fill(t, r, acked, 3000, nil)
	if err != nil {
		t.Fatalf("writes while a follower's disk is full: %d, then %v", more, err)
	}
	t.Logf("follower faulted after %d keys; %d more written through the others", acked, more)
	remount(t, mnt, "size=400m")
	t0 := time.Now()
	want, err := c.client(leader).Do(context.Background(), "DEBUG", "DIGEST").Text()
	if err != nil {
		t.Fatal(err)
	}
	c.settle(30*time.Second, 100*time.Millisecond, "the follower catching up", func() string {
		got, err := c.client(small).Do(context.Background(), "DEBUG", "DIGEST").Text()
		if err != nil || got != want {
			return fmt.Sprintf("digest %s (%v), the leader's %s", got, err, want)
		}
		return ""
	})
	t.Logf("the follower caught up %s after its file system grew", time.Since(t0).Round(time.Millisecond))
	if n, err := c.client(small).DBSize(context.Background()).Result(); err != nil || n != int64(acked+more) {
		t.Errorf("DBSIZE through the follower: %d, %v; want %d", n, err, acked+more)
	}
}

// TestDataDirStartupErrors: a data dir that cannot be created, one on a
// read-only file system, and one in use by another process each stop the
// node at start-up with an error that says so.
func TestDataDirStartupErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	startFails := func(t *testing.T, dir, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, append(freeSoloAddrs(t).flags(), "--data-dir", dir, "--log-level", "warn")...).CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) {
			t.Errorf("start on %s: %v, output:\n%s\nwant it to fail saying %q", dir, err, out, want)
		}
	}
	t.Run("cannot be created", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		startFails(t, filepath.Join(file, "data"), "cannot be created")
	})
	t.Run("read-only", func(t *testing.T) {
		mnt := mountTmpfs(t, "10m")
		if err := os.Mkdir(filepath.Join(mnt, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		remount(t, mnt, "ro")
		startFails(t, filepath.Join(mnt, "data"), "is read-only")
		startFails(t, filepath.Join(mnt, "new"), "cannot be created: the file system is read-only")
	})
	t.Run("in use", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		n := startSolo(t, freeSoloAddrs(t), dir)
		n.waitServing(t)
		startFails(t, dir, "is in use by another process")
	})
}

// tearTail cuts the last commit frame of the raft log's tail segment in
// data dir dir short, as a crash during its write would: the 8 bytes of
// the last frame written are zeroed.
func tearTail(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "raft-wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment in %s: %v", dir, err)
	}
	seg := segs[len(segs)-1]
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	end = (end + 7) &^ 7 // frames are 8-byte aligned; the last is a commit frame
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 8), int64(end-8)); err != nil {
		t.Fatal(err)
	}
}

// TestTornTailAtStart: a node whose log ends with a torn batch refuses to
// start with --fsync everysec (the batch may have been acknowledged),
// saying why; with --fsync always (whose appends return only after the
// fsync, so the batch never was) it drops the batch, says so, and serves.
func TestTornTailAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	a, dir := freeSoloAddrs(t), filepath.Join(t.TempDir(), "data")
	addr := a.addr
	n := startSolo(t, a, dir)
	n.waitServing(t)
	r := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	defer r.Close()
	for i := range 20 {
		if err := r.Do(context.Background(), "RL.FIXED", "k"+strconv.Itoa(i), "100", "30d").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.run.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	tearTail(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append(a.flags(), "--data-dir", dir, "--fsync", "everysec", "--log-level", "warn")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ends with a torn batch") || !strings.Contains(string(out), "may have been acknowledged") {
		t.Fatalf("start with a torn tail and --fsync everysec: %v\n%s", err, out)
	}
	n = startSolo(t, a, dir, "--fsync", "always")
	n.waitServing(t)
	if !strings.Contains(n.logText(), "dropped the torn last batch") {
		t.Errorf("the log does not say the torn batch was dropped:\n%s", n.logText())
	}
	if err := r.Do(context.Background(), "RL.FIXED", "after", "100", "30d").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestTornTailFollower: a follower of three whose log ends with a torn
// batch (--fsync always) drops it at start and gets it, and all it missed,
// from the leader: its state ends equal to the leader's.
func TestTornTailFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newTestCluster(t, 3)
	c.waitServing(c.nodes...)
	leader := c.leader()
	var follower *proc
	for _, p := range c.nodes {
		if p != leader {
			follower = p
		}
	}
	ctx := context.Background()
	r := c.client(leader)
	for i := range 50 {
		if err := r.Do(ctx, "RL.FIXED", "k"+strconv.Itoa(i), "100", "30d").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Stop(follower, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tearTail(t, follower.Dir)
	for i := 50; i < 80; i++ {
		if err := r.Do(ctx, "RL.FIXED", "k"+strconv.Itoa(i), "100", "30d").Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.start(follower)
	want, err := c.client(leader).Do(ctx, "DEBUG", "DIGEST").Text()
	if err != nil {
		t.Fatal(err)
	}
	c.settle(30*time.Second, 100*time.Millisecond, "the follower catching up", func() string {
		got, err := c.client(follower).Do(ctx, "DEBUG", "DIGEST").Text()
		if err != nil || got != want {
			return fmt.Sprintf("digest %s (%v), the leader's %s", got, err, want)
		}
		return ""
	})
	b, _ := os.ReadFile(follower.Dir + ".log")
	if !strings.Contains(string(b), "dropped the torn last batch") {
		t.Errorf("the follower's log does not say it dropped the torn batch:\n%s", b)
	}
}

// TestDiskFullLeader: when the leader's file system fills, it steps down
// and asks another voter to take over at once, so the others elect a
// leader among themselves; clients of the other nodes keep being served,
// and a command caught in the change sees what a leader change gives
// (CLUSTERDOWN: not applied, or UNCERTAIN), never MISCONF (a leader's MISCONF to a forwarded command means not
// applied, and the follower sends it to the next leader); once the file
// system grows the old leader catches up.
func TestDiskFullLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	mnt := mountTmpfs(t, "100m")
	c := newTestClusterWith(t, 3, func(nodes []*proc) { nodes[0].Dir = filepath.Join(mnt, "n1") })
	c.waitServing(c.nodes...)
	small := c.nodes[0]
	ctx := context.Background()
	testkit.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		if l := c.leader(); l != small {
			_ = c.client(l).Do(ctx, "RAFT.TRANSFER", small.ID).Err()
			return fmt.Errorf("%s leads, not %s", l.ID, small.ID)
		}
		return nil
	})
	faulted := func() bool {
		b, _ := os.ReadFile(small.Dir + ".log")
		return strings.Contains(string(b), "the raft log cannot be written")
	}
	r := c.client(c.nodes[1]) // a follower, forwarding to the leader
	acked, down, uncertain, afterFault := 0, 0, 0, 0
	for i := 0; i < 400_000 && afterFault < 5000; i += 100 {
		n, err := fill(t, r, i, 100, nil)
		acked += n
		if faulted() {
			afterFault += n
		}
		switch {
		case err == nil:
		case strings.HasPrefix(err.Error(), "CLUSTERDOWN"):
			down++
		case strings.HasPrefix(err.Error(), "UNCERTAIN"):
			uncertain++
		default:
			c.dumpLogs()
			t.Fatalf("after %d keys, a client of a healthy node got %v", acked, err)
		}
	}
	if !faulted() {
		t.Fatal("the leader's disk never filled")
	}
	if l := c.leader(); l == small {
		t.Fatal("the node whose disk is full still leads")
	}
	if b, _ := os.ReadFile(small.Dir + ".log"); !strings.Contains(string(b), "asked another voter to take the leadership at once") {
		t.Errorf("the leader whose disk filled did not hand the leadership over:\n%s", b)
	}
	t.Logf("%d keys acknowledged through a follower, %d of them after the leader's disk filled; pipelines that failed: %d CLUSTERDOWN, %d UNCERTAIN",
		acked, afterFault, down, uncertain)
	remount(t, mnt, "size=400m")
	t0 := time.Now()
	c.settle(60*time.Second, 100*time.Millisecond, "the old leader catching up", func() string {
		want, err := c.client(c.nodes[1]).Do(ctx, "DEBUG", "DIGEST").Text()
		if err != nil {
			return err.Error()
		}
		got, err := c.client(small).Do(ctx, "DEBUG", "DIGEST").Text()
		if err != nil || got != want {
			return fmt.Sprintf("digest %s (%v), the others' %s", got, err, want)
		}
		return ""
	})
	t.Logf("the old leader caught up %s after its file system grew", time.Since(t0).Round(time.Millisecond))
}
