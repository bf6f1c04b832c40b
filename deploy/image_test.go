package deploy

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestImage checks the image make image built ($SLUICE_IMAGE; make
// deploy-test sets it): its configuration (non-root user, volume, ports,
// health check, entrypoint), and, since a container cannot run here, the
// binary and /etc/passwd copied out of it with podman create and podman
// cp: the binary is static, says its version, accepts the image's default
// command line, and serves PING.
func TestImage(t *testing.T) {
	image := os.Getenv("SLUICE_IMAGE")
	podman, err := exec.LookPath("podman")
	if image == "" || err != nil {
		if slow() {
			t.Fatalf("SLUICE_IMAGE=%q, podman: %v", image, err)
		}
		t.Skip("no SLUICE_IMAGE or podman: make deploy-test builds and checks the image")
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(podman, args...).Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		return strings.TrimSpace(string(out))
	}

	var inspect []struct {
		Config struct {
			User         string
			ExposedPorts map[string]struct{}
			Volumes      map[string]struct{}
			Entrypoint   []string
			Cmd          []string
		}
		Healthcheck struct{ Test []string }
	}
	if err := json.Unmarshal([]byte(run("image", "inspect", image)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	cfg, hc := inspect[0].Config, inspect[0].Healthcheck
	if cfg.User != "65532:65532" {
		t.Errorf("USER %q, want the non-root 65532:65532", cfg.User)
	}
	for _, port := range []string{"6379/tcp", "7379/tcp", "8379/tcp", "9121/tcp"} {
		if _, ok := cfg.ExposedPorts[port]; !ok {
			t.Errorf("EXPOSE lacks %s: %v", port, cfg.ExposedPorts)
		}
	}
	if _, ok := cfg.Volumes["/data"]; !ok {
		t.Errorf("no VOLUME /data: %v", cfg.Volumes)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/sluice"}) {
		t.Errorf("ENTRYPOINT %q", cfg.Entrypoint)
	}
	if len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != "/usr/local/bin/sluice" || hc.Test[2] != "healthcheck" {
		t.Errorf("HEALTHCHECK %q, want CMD /usr/local/bin/sluice healthcheck ...", hc.Test)
	}

	id := run("create", image)
	defer exec.Command(podman, "rm", "-f", id).Run()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	run("cp", id+":/usr/local/bin/sluice", bin)
	run("cp", id+":/etc/passwd", filepath.Join(dir, "passwd"))
	run("cp", id+":/etc/ssl/certs/ca-certificates.crt", filepath.Join(dir, "ca.crt"))
	// The whole file system: the four files, and /data owned by the user.
	export := exec.Command(podman, "export", id)
	stream, err := export.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := export.Start(); err != nil {
		t.Fatal(err)
	}
	var files []string
	tr := tar.NewReader(stream)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("podman export: %v", err)
		}
		switch {
		case h.Typeflag == tar.TypeReg:
			files = append(files, h.Name)
		case h.Name == "data/" && (h.Uid != 65532 || h.Gid != 65532):
			t.Errorf("/data is owned by %d:%d, want the user sluice 65532:65532", h.Uid, h.Gid)
		}
	}
	if err := export.Wait(); err != nil {
		t.Fatalf("podman export: %v", err)
	}
	slices.Sort(files)
	if want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/sluice"}; !slices.Equal(files, want) {
		t.Errorf("the image holds %q, want %q", files, want)
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "passwd"))
	if !regexp.MustCompile(`(?m)^sluice:x:65532:65532:`).Match(passwd) {
		t.Errorf("/etc/passwd has no sluice user 65532:\n%s", passwd)
	}
	if st, err := os.Stat(filepath.Join(dir, "ca.crt")); err != nil || st.Size() < 1000 {
		t.Errorf("CA certificates: %v", err)
	}
	if out, _ := exec.Command("file", bin).Output(); len(out) > 0 && !strings.Contains(string(out), "statically linked") {
		t.Errorf("the binary is not static: %s", out)
	}

	out, err := exec.Command(bin, "version").Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "sluice ") ||
		!regexp.MustCompile(`^commit [0-9a-f]{40}( \(dirty\))?$`).MatchString(lines[1]) || !strings.HasPrefix(lines[2], "go1.") {
		t.Fatalf("sluice version from the image: %v\n%s", err, out)
	}
	// The default command line, as the image runs it, passes validation.
	if out, err := exec.Command(bin, append([]string{"check-config"}, cfg.Cmd...)...).CombinedOutput(); err != nil {
		t.Errorf("the image's CMD %q: %v\n%s", cfg.Cmd, err, out)
	}

	addr := freeAddrs(t, 1)[0]
	p, err := sluiceproc.Start("image-sluice", bin, []string{"--addr", addr, "--in-memory", "--log-level", "warn"}, sluiceproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	testkit.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := exec.Command(bin, "healthcheck", "--addr", addr, "--timeout", "1s").Run(); err != nil {
			return fmt.Errorf("sluice healthcheck never passed: %w", err)
		}
		return nil
	})
	c, err := respwire.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Do(2*time.Second, "PING"); err != nil || v.Str != "PONG" {
		t.Fatalf("PING: %v %v", v, err)
	}
}
