package deploy

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/testcerts"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// update regenerates the golden files of the rendered chart:
// go test ./deploy -run TestHelmChart -update
var update = flag.Bool("update", false, "rewrite testdata/helm/*.golden.yaml from helm template")

// helmVersion is the helm release the chart is tested with, built from its
// Go module once into the user's cache directory.
const helmVersion = "v3.22.0"

// helmBinary returns helm: $SLUICE_HELM, else the one built earlier in the
// cache, else (in make deploy-test) one built now; otherwise the test is
// skipped.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_HELM"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache dir for helm: %v", err)
	}
	dir := filepath.Join(cache, "sluice", "helm-"+helmVersion)
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if !slow() {
		t.Skipf("no helm at %s: make deploy-test builds it (go install helm.sh/helm/v3/cmd/helm@%s)", bin, helmVersion)
	}
	install := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
	install.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	install.Dir = os.TempDir() // outside this module: helm's own go.mod decides
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install helm %s: %v\n%s", helmVersion, err, out)
	}
	return bin
}

// TestHelmChart lints the chart and renders it with each
// testdata/helm/*.values.yaml: the output must equal its golden file, hold
// the objects the deployment relies on, and every pod's command line (its
// membership file included) must pass the binary's own validation.
func TestHelmChart(t *testing.T) {
	helm := helmBinary(t)
	chart := filepath.Join("helm", "sluice")
	if out, err := exec.Command(helm, "lint", "--strict", chart).CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	scenarios, _ := filepath.Glob(filepath.Join("testdata", "helm", "*.values.yaml"))
	if len(scenarios) < 3 {
		t.Fatalf("only %d scenarios", len(scenarios))
	}
	for _, values := range scenarios {
		name := strings.TrimSuffix(filepath.Base(values), ".values.yaml")
		t.Run(name, func(t *testing.T) {
			if out, err := exec.Command(helm, "lint", "--strict", chart, "-f", values).CombinedOutput(); err != nil {
				t.Fatalf("helm lint -f %s: %v\n%s", values, err, out)
			}
			rendered, err := exec.Command(helm, "template", "demo", chart, "--namespace", "rl", "-f", values).Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderrOf(err))
			}
			golden := filepath.Join("testdata", "helm", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, rendered, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./deploy -run TestHelmChart -update writes it)", err)
			}
			if !bytes.Equal(rendered, want) {
				t.Errorf("helm template differs from %s (review, then -update):\n%s", golden, testkit.LineDiff("want", string(want), "got", string(rendered), 10))
			}
			var v struct {
				Cluster struct{ Rejoin []string }
			}
			raw, err := os.ReadFile(values)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(raw, &v); err != nil {
				t.Fatalf("%s: %v", values, err)
			}
			checkManifests(t, rendered, 3-len(v.Cluster.Rejoin))
		})
	}
	// Values that cannot work are refused at render time.
	for _, bad := range [][]string{
		{"--set", "replicaCount=2"},
		{"--set", "cluster.fsync=sometimes"},
		{"--set", "cluster.shards=65"}, // values.schema.json
		{"--set", "maxmemory=lots"},
		{"--set", "tls.enabled=true"},
	} {
		if out, err := exec.Command(helm, append([]string{"template", "demo", chart}, bad...)...).CombinedOutput(); err == nil {
			t.Errorf("helm template %q rendered:\n%.300s", bad, out)
		}
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// manifest is the part of a Kubernetes object the checks read.
type manifest struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
	Spec     struct {
		Replicas            int
		ServiceName         string `yaml:"serviceName"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		ClusterIP           string `yaml:"clusterIP"`
		PublishNotReady     bool   `yaml:"publishNotReadyAddresses"`
		MaxUnavailable      int    `yaml:"maxUnavailable"`
		VolumeClaims        []struct {
			Metadata struct{ Name string }
		} `yaml:"volumeClaimTemplates"`
		Template struct {
			Spec struct {
				Containers []struct {
					Args           []string
					ReadinessProbe struct {
						HTTPGet struct{ Path, Port string } `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
					LivenessProbe struct {
						HTTPGet struct{ Path string } `yaml:"httpGet"`
					} `yaml:"livenessProbe"`
					VolumeMounts []struct {
						Name      string
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				}
			}
		}
	}
}

// decodeManifests parses helm template's output by kind; it holds one
// StatefulSet and one ConfigMap.
func decodeManifests(t *testing.T, rendered []byte) map[string][]manifest {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	byKind := map[string][]manifest{}
	for {
		var m manifest
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("rendered YAML: %v", err)
		}
		if m.Kind != "" {
			byKind[m.Kind] = append(byKind[m.Kind], m)
		}
	}
	if len(byKind["StatefulSet"]) != 1 || len(byKind["ConfigMap"]) != 1 || len(byKind["StatefulSet"][0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one StatefulSet with one container and one ConfigMap: %v", byKind)
	}
	return byKind
}

// checkManifests checks the rendered objects: a StatefulSet with claims
// and probes, the headless peers' service, the PDB, and each pod's
// command line validated by sluice check-config.
func checkManifests(t *testing.T, rendered []byte, wantBootstrap int) {
	t.Helper()
	byKind := decodeManifests(t, rendered)
	sts, members := byKind["StatefulSet"][0], byKind["ConfigMap"][0]
	if sts.Spec.PodManagementPolicy != "Parallel" || len(sts.Spec.VolumeClaims) != 1 || sts.Spec.VolumeClaims[0].Metadata.Name != "data" {
		t.Errorf("StatefulSet: policy %q, claims %v", sts.Spec.PodManagementPolicy, sts.Spec.VolumeClaims)
	}
	headless := false
	for _, svc := range byKind["Service"] {
		if svc.Metadata.Name == sts.Spec.ServiceName {
			headless = svc.Spec.ClusterIP == "None" && svc.Spec.PublishNotReady
		}
	}
	if !headless {
		t.Errorf("no headless service %q publishing not-ready pods", sts.Spec.ServiceName)
	}
	for _, pdb := range byKind["PodDisruptionBudget"] {
		if pdb.Spec.MaxUnavailable != 1 {
			t.Errorf("PodDisruptionBudget maxUnavailable %d", pdb.Spec.MaxUnavailable)
		}
	}
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("want one container")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port != "metrics" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: readiness %+v, liveness %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	flagArgs(t, "StatefulSet args", c.Args)
	if len(members.Data) != sts.Spec.Replicas {
		t.Errorf("%d membership files for %d replicas", len(members.Data), sts.Spec.Replicas)
	}

	// Every pod's command line as Kubernetes would run it: $(POD_NAME) and
	// $(SLUICE_PASSWORD) expanded, the mounted files (membership, TLS)
	// replaced by local ones.
	dir := t.TempDir()
	certs := testcerts.Generate(t, dir)
	files := map[string]string{
		"/tls/client/tls.crt": certs.Cert, "/tls/client/tls.key": certs.Key, "/tls/client/ca.crt": certs.CA,
		"/tls/peer/tls.crt": certs.Cert, "/tls/peer/tls.key": certs.Key, "/tls/peer/ca.crt": certs.CA,
	}
	bootstrap, joiners := 0, 0
	for file, text := range members.Data {
		pod := strings.TrimSuffix(file, ".conf")
		if !regexp.MustCompile(`(?m)^id ` + regexp.QuoteMeta(pod) + `$`).MatchString(text) {
			t.Errorf("%s: no id line for %s:\n%s", file, pod, text)
		}
		if strings.Contains(text, "\nno-bootstrap yes") {
			joiners++
		} else {
			bootstrap++
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			a = strings.ReplaceAll(a, "/etc/sluice/members/$(POD_NAME).conf", path)
			a = strings.ReplaceAll(a, "$(SLUICE_PASSWORD)", "pw")
			if local, ok := files[a]; ok {
				a = local
			}
			args[i] = a
		}
		checkConfig(t, args...)
	}
	if bootstrap != wantBootstrap {
		t.Errorf("%d pods bootstrap, want %d", bootstrap, wantBootstrap)
	}
	if joiners != sts.Spec.Replicas-wantBootstrap {
		t.Errorf("%d pods waiting to be joined, want %d", joiners, sts.Spec.Replicas-wantBootstrap)
	}
}
