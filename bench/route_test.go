package bench

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/slots"
)

// TestRoutedLoadSendsEachKeyToItsMaster: two fake masters, each owning
// half the slots by CLUSTER SLOTS; a routed load sends every request to
// the master of its key's slot, pipelines split between them, and counts
// every reply.
func TestRoutedLoadSendsEachKeyToItsMaster(t *testing.T) {
	decision := "*5\r\n:1\r\n:9\r\n:8\r\n:0\r\n:100\r\n"
	var fakes [2]*fakeServer
	handler := func(me int) func(args []string) string {
		return func(args []string) string {
			if args[0] == "CLUSTER" {
				var b strings.Builder
				b.WriteString("*2\r\n")
				for i, r := range [][2]int{{0, 8191}, {8192, 16383}} {
					host, port, _ := strings.Cut(fakes[i].addr(), ":")
					fmt.Fprintf(&b, "*3\r\n:%d\r\n:%d\r\n*3\r\n$%d\r\n%s\r\n:%s\r\n$2\r\nid\r\n", r[0], r[1], len(host), host, port)
				}
				return b.String()
			}
			if slot := slots.Of([]byte(args[1])); (slot < 8192) != (me == 0) {
				return "-MOVED " + strconv.Itoa(slot) + " elsewhere\r\n"
			}
			return decision
		}
	}
	for i := range fakes {
		fakes[i] = startFake(t, handler(i))
	}
	route, err := ClusterRoute(testCtx(t), fakes[1].addr())
	if err != nil {
		t.Fatal(err)
	}
	if len(route.Addrs) != 2 || route.Addrs[0] != fakes[0].addr() || route.Addrs[1] != fakes[1].addr() {
		t.Fatalf("route masters %v", route.Addrs)
	}
	const total = 3000
	res, err := RunLoad(testCtx(t), Workload{Alg: AlgToken, Keys: 1000, Dist: DistUniform, Cost: 1, Prefix: "r:"}, SluiceDialect{},
		LoadOptions{Route: route, Conns: 3, Pipeline: 8, Requests: total, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != total || res.Allowed != total || res.Errors != 0 {
		t.Fatalf("requests %d allowed %d errors %d (first %q), want %d allowed", res.Requests, res.Allowed, res.Errors, res.FirstError, total)
	}
	for i, f := range fakes {
		n := 0
		for _, c := range f.commands() {
			if c[0] != "CLUSTER" {
				n++
			}
		}
		if n < total/4 {
			t.Errorf("master %d served %d of %d requests: the keys are not spread", i, n, total)
		}
	}
}
