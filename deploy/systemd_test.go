package deploy

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
)

// TestSystemdUnitVerify installs systemd/sluice.service into a temporary
// root (with the binary where ExecStart expects it) and runs
// systemd-analyze verify on it: any complaint fails the test (verify exits
// 0 on a bad value it ignores, so its output must be empty).
func TestSystemdUnitVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if slow() {
			t.Fatal("systemd-analyze not found")
		}
		t.Skip("systemd-analyze not found")
	}
	unit, err := os.ReadFile("systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	install := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		to = filepath.Join(root, to)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	install(binary, "usr/local/bin/sluice", 0o755)
	install("/bin/kill", "bin/kill", 0o755)
	install("systemd/sluice.service", "etc/systemd/system/sluice.service", 0o644)
	// The targets and slices the unit's dependencies resolve to.
	for _, pattern := range []string{"/usr/lib/systemd/system/*.target", "/usr/lib/systemd/system/*.slice", "/lib/systemd/system/*.target", "/lib/systemd/system/*.slice"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
				install(m, filepath.Join("usr/lib/systemd/system", filepath.Base(m)), 0o644)
			}
		}
	}
	out, err := exec.Command(analyze, "verify", "--root="+root, "sluice.service").CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// What the issue asks of the unit, line by line.
	for _, line := range []string{
		"Type=notify", "User=sluice", "StateDirectory=sluice", "ProtectSystem=strict", "ProtectHome=true",
		"NoNewPrivileges=true", "PrivateTmp=true", "ReadWritePaths=/var/lib/sluice", "CapabilityBoundingSet=",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "SystemCallFilter=@system-service",
		"ExecStart=/usr/local/bin/sluice --config /etc/sluice/sluice.conf", "ExecReload=/bin/kill -HUP $MAINPID",
		"LimitNOFILE=65536",
	} {
		if !strings.Contains("\n"+string(unit)+"\n", "\n"+line+"\n") {
			t.Errorf("sluice.service lacks the line %q", line)
		}
	}
}

// TestSystemdExampleConfigs: the single-node file and the three-node set
// pass the binary's own validation, and the three agree on the cluster.
func TestSystemdExampleConfigs(t *testing.T) {
	checkConfig(t, "--config", "systemd/sluice.conf")
	var peers, shards string
	for _, id := range []string{"n1", "n2", "n3"} {
		path := filepath.Join("systemd", "cluster", id+".conf")
		checkConfig(t, "--config", path)
		settings := readConf(t, path)
		if settings["id"] != id {
			t.Errorf("%s: id %q", path, settings["id"])
		}
		if peers == "" {
			peers, shards = settings["peers"], settings["shards"]
		} else if settings["peers"] != peers || settings["shards"] != shards {
			t.Errorf("%s: peers %q shards %q differ from n1's %q %q", path, settings["peers"], settings["shards"], peers, shards)
		}
		if !strings.Contains(","+peers+",", ","+id+"="+settings["raft-addr"]+",") {
			t.Errorf("%s: raft-addr %s is not %s's entry in peers %s", path, settings["raft-addr"], id, peers)
		}
		if settings["data-dir"] != "/var/lib/sluice" {
			t.Errorf("%s: data-dir %q, want the unit's StateDirectory /var/lib/sluice", path, settings["data-dir"])
		}
	}
}

// readConf reads "name value" lines (no quoting beyond plain double quotes).
func readConf(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		out[name] = strings.Trim(strings.TrimSpace(value), `"`)
	}
	return out
}

// notifySocket listens where NOTIFY_SOCKET will point and returns the path
// and a function that reads the next datagram (failing after timeout).
func notifySocket(t *testing.T) (string, func(timeout time.Duration) string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, func(timeout time.Duration) string {
		t.Helper()
		buf := make([]byte, 4096)
		_ = conn.SetReadDeadline(time.Now().Add(timeout))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no sd_notify datagram within %s: %v", timeout, err)
		}
		return string(buf[:n])
	}
}

// startNotified starts the binary with NOTIFY_SOCKET set.
func startNotified(t *testing.T, socket string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+socket)
	logf, err := os.Create(filepath.Join(t.TempDir(), "sluice.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("sluice log:\n%s", b)
		}
		logf.Close()
	})
	return cmd
}

// untilReady reads datagrams until READY=1, checking that those before it
// only report status.
func untilReady(t *testing.T, read func(time.Duration) string) string {
	t.Helper()
	for {
		msg := read(20 * time.Second)
		if strings.HasPrefix(msg, "READY=1") {
			return msg
		}
		if !strings.HasPrefix(msg, "STATUS=waiting: ") {
			t.Fatalf("before READY=1: %q", msg)
		}
	}
}

// decide asks addr for one decision, which succeeds only if the node serves.
func decide(t *testing.T, addr string) {
	t.Helper()
	c, err := respwire.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Do(5*time.Second, "RL.TOKEN", "sd", "10", "1/m")
	if err != nil || v.Kind != respwire.Array || len(v.Elems) != 5 || v.Elems[0].Int != 1 {
		t.Fatalf("RL.TOKEN right after READY=1: %v %v", v, err)
	}
}

// TestSystemdNotifyReadyStopping runs the real binary as systemd would
// with Type=notify: a durable single node sends READY=1 once it serves (a
// decision succeeds at once), then STOPPING=1 on SIGTERM, and exits 0;
// restarted on its data dir, it sends READY=1 only with its log replayed
// (the decision is there).
func TestSystemdNotifyReadyStopping(t *testing.T) {
	socket, read := notifySocket(t)
	// The Raft and forward ports too: their defaults (the RESP port + 1000
	// and + 2000) are not checked free and may fall in the ephemeral range.
	a := freeAddrs(t, 3)
	addr, raftAddr, fwdAddr := a[0], a[1], a[2]
	data := filepath.Join(t.TempDir(), "data")
	for run := range 2 {
		cmd := startNotified(t, socket, "--addr", addr, "--raft-addr", raftAddr, "--forward-addr", fwdAddr, "--data-dir", data, "--log-level", "warn")
		ready := untilReady(t, read)
		if !strings.Contains(ready, "STATUS=serving on "+addr) {
			t.Errorf("READY datagram %q lacks the status line", ready)
		}
		if run == 0 {
			decide(t, addr)
		} else {
			c, err := respwire.Dial(addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.Do(5*time.Second, "RL.PEEK", "sd")
			c.Close()
			if err != nil || len(v.Elems) != 5 || v.Elems[2].Int != 9 {
				t.Fatalf("RL.PEEK right after READY=1 on restart: %v %v, want 9 remaining", v, err)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if msg := read(10 * time.Second); msg != "STOPPING=1" {
			t.Fatalf("after SIGTERM: %q, want STOPPING=1", msg)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	}
}

// TestSystemdNotifyWaitsForQuorum: a cluster member alone does not serve,
// so it reports STATUS=waiting and no READY=1; once a second member starts
// (a quorum of three), READY=1 comes and a decision succeeds.
func TestSystemdNotifyWaitsForQuorum(t *testing.T) {
	socket, read := notifySocket(t)
	nodes, err := sluiceproc.Layout(3, t.TempDir(), sluiceproc.FreeAddr)
	if err != nil {
		t.Fatal(err)
	}
	peers := sluiceproc.Peers(nodes)
	common := []string{"--in-memory", "--log-level", "error"}
	startNotified(t, socket, nodes[0].Args(peers, common...)...)
	if msg := read(20 * time.Second); !strings.HasPrefix(msg, "STATUS=waiting: ") {
		t.Fatalf("a member alone sent %q, want STATUS=waiting: ...", msg)
	}
	p, err := sluiceproc.Start("n2", binary, nodes[1].Args(peers, common...), sluiceproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	untilReady(t, read)
	decide(t, nodes[0].RESP)
}
