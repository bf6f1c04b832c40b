package deploy

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestComposeFile parses compose.yaml and checks that it describes a
// three-node cluster the binary accepts: every node's command passes sluice
// check-config, the ids and Raft addresses match one shared --peers, each
// node keeps its data in its own named volume, and the published ports are
// distinct and on loopback.
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Image       string
			Hostname    string
			Command     []string
			Ports       []string
			Volumes     []string
			Healthcheck struct{ Test []string }
		}
		Volumes map[string]any
	}
	if err := yaml.Unmarshal(data, &file); err != nil { // merges the x-sluice anchor
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(file.Services) != 3 {
		t.Fatalf("%d services, want 3", len(file.Services))
	}
	var peers string
	ids := map[string]bool{}
	hostPorts := map[string]string{}
	for name, svc := range file.Services {
		if svc.Image == "" || svc.Hostname != name {
			t.Errorf("%s: image %q, hostname %q (the Raft addresses use the service names)", name, svc.Image, svc.Hostname)
		}
		if len(svc.Healthcheck.Test) < 3 || svc.Healthcheck.Test[1] != "/usr/local/bin/sluice" || svc.Healthcheck.Test[2] != "healthcheck" {
			t.Errorf("%s: healthcheck %q", name, svc.Healthcheck.Test)
		}
		flags := flagArgs(t, name, svc.Command)
		for _, want := range []string{"id", "addr", "raft-addr", "peers", "data-dir", "metrics-addr"} {
			if !slices.Contains(flags, want) {
				t.Errorf("%s: no --%s", name, want)
			}
		}
		checkConfig(t, svc.Command...)
		arg := func(flag string) string {
			i := slices.Index(svc.Command, "--"+flag)
			if i < 0 || i+1 >= len(svc.Command) {
				return ""
			}
			return svc.Command[i+1]
		}
		id := arg("id")
		if ids[id] {
			t.Errorf("%s: id %s twice", name, id)
		}
		ids[id] = true
		if peers == "" {
			peers = arg("peers")
		} else if arg("peers") != peers {
			t.Errorf("%s: --peers %q differs from %q", name, arg("peers"), peers)
		}
		if !strings.Contains(","+peers+",", ","+id+"="+arg("raft-addr")+",") || !strings.HasPrefix(arg("raft-addr"), name+":") {
			t.Errorf("%s: --raft-addr %q is not its entry in --peers %q", name, arg("raft-addr"), peers)
		}
		if want := []string{name + "-data:" + arg("data-dir")}; !slices.Equal(svc.Volumes, want) {
			t.Errorf("%s: volumes %q, want %q", name, svc.Volumes, want)
		}
		if _, ok := file.Volumes[name+"-data"]; !ok {
			t.Errorf("%s: volume %s-data not declared", name, name)
		}
		_, respPort, _ := strings.Cut(arg("addr"), ":")
		_, metricsPort, _ := strings.Cut(arg("metrics-addr"), ":")
		published := map[string]bool{}
		for _, p := range svc.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q is not published on 127.0.0.1", name, p)
				continue
			}
			if other, dup := hostPorts[parts[1]]; dup {
				t.Errorf("%s: host port %s also published by %s", name, parts[1], other)
			}
			hostPorts[parts[1]] = name
			published[parts[2]] = true
		}
		if !published[respPort] || !published[metricsPort] {
			t.Errorf("%s: ports %q do not publish RESP %s and metrics %s", name, svc.Ports, respPort, metricsPort)
		}
	}
	if n := len(strings.Split(peers, ",")); n != 3 {
		t.Errorf("--peers %q lists %d nodes", peers, n)
	}
}

// TestComposeClusterRuns runs the compose file's three services as local
// processes, with their commands as written (the service names mapped to
// free local ports, the volume to a temporary directory): the three form a
// cluster with three groups, each becomes ready, and each answers a
// decision.
func TestComposeClusterRuns(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct{ Command []string }
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	type node struct{ resp, raft, fwd, metrics string }
	nodes := map[string]*node{}
	for name := range file.Services {
		n := &node{}
		for _, a := range []*string{&n.resp, &n.raft, &n.fwd, &n.metrics} {
			if *a, err = sluiceproc.FreeAddr(); err != nil {
				t.Fatal(err)
			}
		}
		nodes[name] = n
	}
	dir := t.TempDir()
	for name, svc := range file.Services {
		n := nodes[name]
		var args []string
		for _, a := range svc.Command {
			switch a {
			case "0.0.0.0:6379":
				a = n.resp
			case "0.0.0.0:9121":
				a = n.metrics
			case "/data":
				a = filepath.Join(dir, name)
			}
			for other, o := range nodes {
				a = strings.ReplaceAll(a, other+":7379", o.raft)
			}
			args = append(args, a)
		}
		// Derived from the Raft port in the containers; given here.
		args = append(args, "--forward-addr", n.fwd, "--log-level", "warn")
		p, err := sluiceproc.Start(name, binary, args, sluiceproc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
	}
	for name, n := range nodes {
		testkit.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			c := &http.Client{Timeout: 2 * time.Second}
			resp, err := c.Get("http://" + n.metrics + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
			return fmt.Errorf("%s never ready", name)
		})
		decide(t, n.resp)
	}
}
