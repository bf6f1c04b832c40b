package resp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// The native Spring Cloud Gateway script (scripts_native.go) replies and
// changes the state exactly as the interpreted Lua: the same random
// sequences of EVALSHA (rates, capacities, requested counts, ARGV[3] now
// or TIME, odd arguments, keys holding odd strings or a hash, a read-only
// run, a key limit that fails SETEX, times that jump either way) run on an
// engine with the native path and on one without, and every reply and
// every step's digest must be the same. The native path must have run.
func TestNativeScriptsMatchInterpreter(t *testing.T) {
	body, err := os.ReadFile("testdata/scripts/spring_request_rate_limiter.lua")
	if err != nil {
		t.Fatal(err)
	}
	nums := []string{"1", "2", "3", "10", "100", "0.5", "2.5", "1e3", "0", "-1", "7 ", " 7", "0x10", "010", "abc", "", "nan", "inf", "-inf", "1e400", "1e-300", "4.9e-324", "9007199254740993", "123456789012345678901234567890", "1.7976931348623157e308"}
	stored := []string{"abc", "", "1e3", " 5 ", "0x1A", "inf", "-nan", "3.14159", "1e308", "-7", "9223372036854775807", "00012"}
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 31))
		// With 3 keys at most, SETEX of a fourth fails: the interpreter's
		// error.
		p := newNativePair(t, seed, 3, int64(1893456000)*1e9, body)
		users := []string{"{a}", "{b}", "{c}"}
		for step := 0; step < 400; step++ {
			p.advance(rng)
			u := users[rng.IntN(len(users))]
			tk, ts := []byte(u+".tokens"), []byte(u+".timestamp")
			if rng.IntN(12) == 0 { // an odd value in a key
				k := tk
				if rng.IntN(2) == 0 {
					k = ts
				}
				p.oddValue(rng, k, stored)
			}
			num := func(common ...string) []byte {
				if rng.IntN(5) == 0 {
					return []byte(nums[rng.IntN(len(nums))])
				}
				return []byte(common[rng.IntN(len(common))])
			}
			rate, capacity := num("1", "5", "10", "0.5", "100"), num("1", "10", "20", "3", "1000")
			nowArg := []byte("")
			if rng.IntN(4) == 0 {
				nowArg = []byte(fmt.Sprint(p.now/1e9 + rng.Int64N(5) - 2))
			}
			if rng.IntN(8) == 0 {
				nowArg = num("1.5", "1893456000.25")
			}
			op := engine.Op{Code: engine.OpEvalSha, Value: p.sha, NumKeys: 2, Key: tk,
				Args: [][]byte{tk, ts, rate, capacity, nowArg, num("1", "1", "2", "5")}}
			p.evalVariant(rng, step, op, func(op *engine.Op) { op.NumKeys, op.Args = 1, op.Args[1:] }, 5)
		}
		p.checkRuns()
	}
}

// nativePair is the differential tests' two engines, one whose script
// runner takes the native path and one whose runner never does (NoNative),
// fed the same ops at the same times, with the script under test loaded
// in both (sha).
type nativePair struct {
	t              *testing.T
	seed           uint64
	native, interp *ScriptRunner
	en, ei         *engine.Engine
	now            int64
	sha            []byte
}

// newNativePair starts the pair at now with body loaded; on every third
// seed the engines hold maxKeys keys at most, so that a write fails.
func newNativePair(t *testing.T, seed uint64, maxKeys int64, now int64, body []byte) *nativePair {
	p := &nativePair{t: t, seed: seed, now: now,
		native: NewScriptRunner(ScriptConfig{}), interp: NewScriptRunner(ScriptConfig{NoNative: true})}
	cfg := engine.Config{Stripes: 16}
	if seed%3 == 0 {
		cfg.MaxKeys = maxKeys
	}
	cfgN, cfgI := cfg, cfg
	cfgN.Scripts, cfgI.Scripts = p.native, p.interp
	p.en, p.ei = engine.New(cfgN), engine.New(cfgI)
	rn, _ := p.apply(engine.Op{Code: engine.OpScriptLoad, Value: body})
	p.sha = rn[0].Value
	return p
}

// apply applies ops to both engines at the pair's time.
func (p *nativePair) apply(ops ...engine.Op) ([]engine.Result, []engine.Result) {
	rn, ri := make([]engine.Result, len(ops)), make([]engine.Result, len(ops))
	p.en.Apply(p.now, ops, rn)
	p.ei.Apply(p.now, ops, ri)
	return rn, ri
}

// advance moves the time by a random step: mostly a little, sometimes a
// lot, sometimes back.
func (p *nativePair) advance(rng *rand.Rand) {
	switch rng.IntN(10) {
	case 0:
		p.now += rng.Int64N(3e9) - 1e9 // back or forth
	case 1:
		p.now += rng.Int64N(100e9)
	default:
		p.now += rng.Int64N(50e6)
	}
}

// oddValue puts something the script does not expect in key: a hash, no
// key at all, or one of the stored strings.
func (p *nativePair) oddValue(rng *rand.Rand, key []byte, stored []string) {
	switch rng.IntN(4) {
	case 0:
		p.apply(engine.Op{Code: engine.OpHSet, Key: key, Args: [][]byte{[]byte("f"), []byte("v")}})
	case 1:
		p.apply(engine.Op{Code: engine.OpDelete, Key: key})
	default:
		p.apply(engine.Op{Code: engine.OpSet, Key: key, Value: []byte(stored[rng.IntN(len(stored))])})
	}
}

// evalAlike applies op to both and fails unless the replies and then the
// states (the digests) are the same.
func (p *nativePair) evalAlike(step int, op engine.Op) {
	t, seed := p.t, p.seed
	t.Helper()
	rn, ri := p.apply(op)
	if rn[0].Err != nil || ri[0].Err != nil {
		t.Fatalf("seed %d step %d: %v, %v", seed, step, rn[0].Err, ri[0].Err)
	}
	if !bytes.Equal(rn[0].Value, ri[0].Value) {
		t.Fatalf("seed %d step %d: EVALSHA %q: native %q, interpreted %q", seed, step, op.Args, rn[0].Value, ri[0].Value)
	}
	dn, kn := p.en.Digest()
	di, ki := p.ei.Digest()
	if dn != di || kn != ki {
		t.Fatalf("seed %d step %d: EVALSHA %q (reply %q): the states differ (%d keys, %d interpreted)", seed, step, op.Args, rn[0].Value, kn, ki)
	}
}

// evalVariant is evalAlike of op, or, one time in twenty each, of op with
// fewer keys (fewerKeys), with only its first nargs arguments, read-only
// (EVALSHA_RO) or over RESP3.
func (p *nativePair) evalVariant(rng *rand.Rand, step int, op engine.Op, fewerKeys func(*engine.Op), nargs int) {
	p.t.Helper()
	switch rng.IntN(20) {
	case 0:
		fewerKeys(&op)
	case 1:
		op.Args = op.Args[:nargs]
	case 2:
		op.Flags |= engine.ScriptReadOnly
	case 3:
		op.Flags |= engine.ScriptRESP3
	}
	p.evalAlike(step, op)
}

// checkRuns fails unless the native path ran for most of the native
// engine's scripts and never for the other's.
func (p *nativePair) checkRuns() {
	p.t.Helper()
	if n, i := nativeRuns(p.native), nativeRuns(p.interp); n < 100 || i != 0 {
		p.t.Fatalf("seed %d: %d native runs (want most), %d with NoNative (want 0)", p.seed, n, i)
	}
}

// redis_rate's GCRA script (allowN) run natively replies and changes the
// state exactly as the interpreted Lua, on random sequences as above.
func TestNativeGCRAMatchesInterpreter(t *testing.T) {
	body, err := os.ReadFile("testdata/scripts/redis_rate_allow_n.lua")
	if err != nil {
		t.Fatal(err)
	}
	odd := []string{"0", "-1", "-0", "0.0", "-0.0", "010", "0x10", " 7", "7 ", "1e3", "abc", "", "nan", "inf", "1.5", "3600.0", "1_000", "123456789012345678", "0.000001"}
	stored := []string{"abc", "", "1e3", " 5 ", "0x1A", "inf", "-nan", "3.14159", "1e308", "-7", "300000000.5", "00012"}
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 32))
		p := newNativePair(t, seed, 2, int64(1893456000)*1e9+123456789, body)
		for step := 0; step < 400; step++ {
			p.advance(rng)
			key := []byte(fmt.Sprintf("rate:{k%d}", rng.IntN(4)))
			if rng.IntN(12) == 0 {
				p.oddValue(rng, key, stored)
			}
			num := func(common ...string) []byte {
				if rng.IntN(6) == 0 {
					return []byte(odd[rng.IntN(len(odd))])
				}
				return []byte(common[rng.IntN(len(common))])
			}
			op := engine.Op{Code: engine.OpEvalSha, Value: p.sha, NumKeys: 1, Key: key,
				Args: [][]byte{key, num("10", "5", "100", "1"), num("10", "1", "100", "3"), num("1", "60", "3600", "0.5"), num("1", "1", "2", "0", "5", "-1")}}
			p.evalVariant(rng, step, op, func(op *engine.Op) { op.NumKeys = 0 }, 4)
		}
		p.checkRuns()
	}
}

// Over the wire, with the clock frozen and warped by DEBUG: EVAL then
// EVALSHA of both native scripts on a server with the native path and on
// one without reply alike, and DEBUG DIGEST agrees after every step.
func TestNativeScriptsOverTheWire(t *testing.T) {
	var conns [2]*rawReplyConn
	var runners [2]*ScriptRunner
	for i, noNative := range []bool{false, true} {
		runners[i] = NewScriptRunner(ScriptConfig{NoNative: noNative})
		conns[i] = dialRawReply(t, startServer(t, Config{EnableDebug: true, Scripts: runners[i]}))
	}
	both := func(args ...string) string {
		a, b := conns[0].do(t, args...), conns[1].do(t, args...)
		if a != b {
			t.Fatalf("%q: native %q, interpreted %q", args, a, b)
		}
		return a
	}
	both("DEBUG", "CLOCK", "FREEZE", "1893456000123")
	spring, err := os.ReadFile("testdata/scripts/spring_request_rate_limiter.lua")
	if err != nil {
		t.Fatal(err)
	}
	gcra, err := os.ReadFile("testdata/scripts/redis_rate_allow_n.lua")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for step := 0; step < 150; step++ {
		both("DEBUG", "TIMEWARP", fmt.Sprint(rng.IntN(1500)))
		if rng.IntN(10) == 0 {
			both("SET", "{u}.tokens", []string{"abc", "7", "1e2", "0x10"}[rng.IntN(4)])
		}
		cmd, body := "EVALSHA", ""
		if step < 2 {
			cmd = "EVAL"
		}
		var args []string
		if step%2 == 0 {
			body = string(spring)
			args = []string{"2", "{u}.tokens", "{u}.ts", fmt.Sprint(1 + rng.IntN(5)), fmt.Sprint(5 + rng.IntN(10)), "", fmt.Sprint(1 + rng.IntN(3))}
		} else {
			body = string(gcra)
			args = []string{"1", "rate:{u}", fmt.Sprint(1 + rng.IntN(10)), fmt.Sprint(1 + rng.IntN(10)), "1", fmt.Sprint(rng.IntN(3))}
		}
		if cmd == "EVALSHA" {
			body = engine.ScriptSHA([]byte(body))
		}
		both(append([]string{cmd, body}, args...)...)
		both("DEBUG", "DIGEST")
	}
	if n, i := nativeRuns(runners[0]), nativeRuns(runners[1]); n < 100 || i != 0 {
		t.Fatalf("%d native runs (want most), %d with NoNative (want 0)", n, i)
	}
}

// nativeRuns is the number of scripts the runner's node ran natively.
func nativeRuns(r *ScriptRunner) int64 {
	var n int64
	for _, st := range *r.stats.by.Load() {
		n += st.native.Load()
	}
	return n
}
