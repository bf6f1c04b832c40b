package resp

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/slots"
)

// TestScriptRunnersPerGroup: the runners of a node's groups share one pool
// of hosts (ForGroup); a script on a key of its own group is never refused
// as non-local, whichever group's run last used a host.
func TestScriptRunnersPerGroup(t *testing.T) {
	const groups = 2
	table, err := slots.Even(groups)
	if err != nil {
		t.Fatal(err)
	}
	base := NewScriptRunner(ScriptConfig{Groups: groups})
	var engines [groups]*engine.Engine
	var keys [groups][]byte
	for g := range engines {
		engines[g] = engine.New(engine.Config{Scripts: base.ForGroup(g)})
		for i := 0; keys[g] == nil; i++ {
			if k := []byte("k" + strconv.Itoa(i)); table.Group(slots.Of(k)) == g {
				keys[g] = k
			}
		}
	}
	res := make([]engine.Result, 1)
	for i := range 200 {
		g := i % groups
		op := engine.Op{Code: engine.OpEval, Value: []byte("return redis.call('INCR', KEYS[1])"), NumKeys: 1, Key: keys[g], Args: [][]byte{keys[g]}}
		engines[g].Apply(1e18+int64(i)*1e6, []engine.Op{op}, res)
		if want := ":" + strconv.Itoa(i/groups+1) + "\r\n"; res[0].Err != nil || string(res[0].Value) != want {
			t.Fatalf("run %d in group %d on its key %s: %v %q, want %q", i, g, keys[g], res[0].Err, res[0].Value, want)
		}
	}
}
