package deploy

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestHelmScalingSteps runs the chart's pods as local processes and walks
// the documented scaling steps: the chart rendered with four replicas and
// one group, every pod started with the rendered command line and its
// membership file (the pods' DNS names mapped to free local ports); the
// three initial members serve, the fourth waits unready until RAFT.JOIN,
// then serves; RAFT.REMOVE takes it out again.
func TestHelmScalingSteps(t *testing.T) {
	helm := helmBinary(t)
	rendered, err := exec.Command(helm, "template", "demo", filepath.Join("helm", "sluice"), "--namespace", "rl",
		"--set", "replicaCount=4", "--set", "cluster.shards=1", "--set", "auth.password=pw").Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderrOf(err))
	}
	objs := decodeManifests(t, rendered)
	sts, members := objs["StatefulSet"][0], objs["ConfigMap"][0]
	args := sts.Spec.Template.Spec.Containers[0].Args

	type pod struct {
		name, host               string
		resp, raft, fwd, metrics string
		conf                     string
	}
	var pods []*pod
	dir := t.TempDir()
	for i := range 4 {
		p := &pod{name: "demo-sluice-" + string(rune('0'+i))}
		p.host = p.name + ".demo-sluice-peers.rl.svc.cluster.local"
		for _, a := range []*string{&p.resp, &p.raft, &p.fwd, &p.metrics} {
			if *a, err = sluiceproc.FreeAddr(); err != nil {
				t.Fatal(err)
			}
		}
		pods = append(pods, p)
	}
	for _, p := range pods {
		text := members.Data[p.name+".conf"]
		if text == "" {
			t.Fatalf("no membership file for %s", p.name)
		}
		for _, q := range pods { // the DNS names of the peers' service, mapped
			text = strings.ReplaceAll(text, q.host+":7379", q.raft)
		}
		p.conf = filepath.Join(dir, p.name+".conf")
		if err := os.WriteFile(p.conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := make([]string, 0, len(args)+2)
		for _, a := range args {
			switch a {
			case "/etc/sluice/members/$(POD_NAME).conf":
				a = p.conf
			case "0.0.0.0:6379":
				a = p.resp
			case "0.0.0.0:9121":
				a = p.metrics
			case "/data":
				a = filepath.Join(dir, p.name)
			case "$(SLUICE_PASSWORD)":
				a = "pw"
			}
			cmd = append(cmd, a)
		}
		// The pods derive the forward port from the Raft port (+1000);
		// free ports here need it given.
		cmd = append(cmd, "--forward-addr", p.fwd)
		logf, err := os.Create(filepath.Join(dir, p.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		proc, err := sluiceproc.Start(p.name, binary, cmd, sluiceproc.Options{Output: logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			proc.Kill()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("%s log:\n%s", p.name, b)
			}
		})
	}
	readyz := func(p *pod) int {
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get("http://" + p.metrics + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			if !ok() {
				return fmt.Errorf("timed out waiting for %s", what)
			}
			return nil
		})
	}
	for _, p := range pods[:3] {
		waitFor(p.name+" ready", func() bool { return readyz(p) == http.StatusOK })
	}
	waitFor("the joiner's /readyz", func() bool { return readyz(pods[3]) != 0 })
	if code := readyz(pods[3]); code != http.StatusServiceUnavailable {
		t.Fatalf("a pod waiting to be joined: /readyz %d, want 503", code)
	}

	// The documented steps: RAFT.JOIN and RAFT.REMOVE, to the leader.
	admin := func(cmd ...string) string {
		t.Helper()
		addr := pods[0].resp
		for range 5 {
			c, err := respwire.Dial(addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := c.Do(5*time.Second, "AUTH", "pw"); err != nil || v.Str != "OK" {
				t.Fatalf("AUTH: %v %v", v, err)
			}
			v, err := c.Do(30*time.Second, cmd...)
			c.Close()
			if err != nil {
				t.Fatalf("%q: %v", cmd, err)
			}
			leader, redirected := strings.CutPrefix(v.Str, "ERR not the leader; leader is ")
			if v.Kind != respwire.SimpleError || !redirected {
				return v.Text(respwire.NoLengths)
			}
			for _, p := range pods { // the advertised name, mapped
				if leader == p.host+":6379" || leader == p.resp {
					addr = p.resp
				}
			}
		}
		t.Fatalf("%q: no leader found", cmd)
		return ""
	}
	membersOf := func() []string {
		c, err := respwire.Dial(pods[0].resp, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Do(2*time.Second, "AUTH", "pw")
		v, err := c.Do(5*time.Second, "RAFT.STATUS")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(v.Elems); i += 2 {
			if v.Elems[i].Str == "members" {
				var ids []string
				for _, m := range strings.Split(v.Elems[i+1].Str, ",") {
					id, _, _ := strings.Cut(m, "=")
					ids = append(ids, id)
				}
				slices.Sort(ids)
				return ids
			}
		}
		t.Fatalf("RAFT.STATUS has no members: %v", v)
		return nil
	}
	if got := admin("RAFT.JOIN", pods[3].name, pods[3].raft); got != "+OK" {
		t.Fatalf("RAFT.JOIN: %s", got)
	}
	waitFor("the joined pod ready", func() bool { return readyz(pods[3]) == http.StatusOK })
	if got := membersOf(); len(got) != 4 || !slices.Contains(got, pods[3].name) {
		t.Fatalf("members after the join: %v", got)
	}
	if got := admin("RAFT.REMOVE", pods[3].name); got != "+OK" {
		t.Fatalf("RAFT.REMOVE: %s", got)
	}
	waitFor("three members", func() bool { return len(membersOf()) == 3 })
	t.Logf("members after the removal: %v", membersOf())
}
