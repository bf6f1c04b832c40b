package resp

import (
	"os"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// BenchmarkSpringScript runs Spring Cloud Gateway's token bucket (the exact
// text Spring sends, resp/testdata/scripts) by
// EVALSHA on an engine, as the apply does (no network, no parsing):
// natively, and in Lua (ScriptConfig.NoNative).
func BenchmarkSpringScript(b *testing.B) {
	b.Run("native", func(b *testing.B) { benchSpring(b, false) })
	b.Run("lua", func(b *testing.B) { benchSpring(b, true) })
}

func benchSpring(b *testing.B, noNative bool) {
	body, err := os.ReadFile("testdata/scripts/spring_request_rate_limiter.lua")
	if err != nil {
		b.Fatal(err)
	}
	runner := NewScriptRunner(ScriptConfig{NoNative: noNative})
	eng := engine.New(engine.Config{Scripts: runner})
	res := make([]engine.Result, 1)
	eng.Apply(1e18, []engine.Op{{Code: engine.OpScriptLoad, Value: body}}, res)
	sha := res[0].Value
	op := engine.Op{Code: engine.OpEvalSha, Value: sha, NumKeys: 2, Key: []byte("{u}.tokens"),
		Args: [][]byte{[]byte("{u}.tokens"), []byte("{u}.ts"), []byte("100"), []byte("1000"), []byte(""), []byte("1")}}
	ops := []engine.Op{op}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		eng.Apply(1e18+int64(i)*1e6, ops, res)
		if res[0].Err != nil || len(res[0].Value) == 0 || res[0].Value[0] != '*' {
			b.Fatalf("%v %q", res[0].Err, res[0].Value)
		}
	}
}
