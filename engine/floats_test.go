package engine

import (
	"errors"
	"testing"
)

// TestIncrByFloatAsRedis runs INCRBYFLOAT on a table of values whose
// replies redis-server 7.0.15 gave on x86-64 (SET k v, INCRBYFLOAT k incr):
// sluice computes in an x87 long double as redis-server does, so even the
// inexact sums (0.1 + 0.2) and values beyond a float64 (1e400) are equal.
func TestIncrByFloatAsRedis(t *testing.T) {
	cases := []struct{ val, incr, want string }{
		{"0", "0.1", "0.1"},
		{"10.5", "0.1", "10.6"},
		{"0", "1e20", "100000000000000000000"},
		{"0", "5.0e3", "5000"},
		{"0", "-0", "0"},
		{"3", "-3", "0"},
		{"0", "1.5e-10", "0.00000000015"},
		{"0", "123456789012345680", "123456789012345680"},
		{"0", "0x10", "16"},
		{"0", "+1.5", "1.5"},
		{"0", "1e-20", "0"},
		{"0", ".5", "0.5"},
		{"0", "5.", "5"},
		{"0", "1E2", "100"},
		{"0", "0x1p3", "8"},
		{"1", "0.25", "1.25"},
		{"-5", "2.5", "-2.5"},
		{"1152921504606846976", "0", "1152921504606846976"},
		{"0", "9.313225746154785e-10", "0.00000000093132257"},
		{"100", "-100.5", "-0.5"},
		{"3.0e3", "1.5", "3001.5"},
		{"0", "-1e-5", "-0.00001"},
		{"0", "7.62939453125e-06", "0.00000762939453125"},
		{"0", "0.00000000000000001", "0.00000000000000001"},
		{"0", "0.000000000000000004", "0"},
		{"10", "0X1P-2", "10.25"},
		{"0", "INF", "ERR increment would produce NaN or Infinity"},
		{"0", "-Infinity", "ERR increment would produce NaN or Infinity"},
		{"0", "1e400", "10000000000000000000281880683947586514586453433629052038625910693539685534008629862039363994848324160522094053927317616200295822777259255734023828976593340661017797447434546173917862448116674971723778943824391593338047470675026246684401359237513603830343735485505244955964979021825038280091068414947402456898653040951017512658092615827588920183472511643316591362664138176309734806343732497430221946880"},
		{"0.1", "0.2", "0.3"},
		{"1.1", "2.2", "3.3"},
		{"abc", "1", "ERR value is not a valid float"},
		{"1", "1a", "ERR value is not a valid float"},
		{"0", "0x", "ERR value is not a valid float"},
		{"0", "1_0", "ERR value is not a valid float"},
		{"0", "1e", "ERR value is not a valid float"},
		{"0", "-", "ERR value is not a valid float"},
		{"0", ".", "ERR value is not a valid float"},
		{"0", "nan", "ERR value is not a valid float"},
		{"0", " 1", "ERR value is not a valid float"},
		{"0", "1 ", "ERR value is not a valid float"},
		{"0", "", "ERR value is not a valid float"},
	}
	e := New(Config{})
	var res [2]Result
	for _, c := range cases {
		key := []byte("k")
		e.Apply(1, []Op{
			{Code: OpSet, Key: key, Value: []byte(c.val)},
			{Code: OpIncrByFloat, Key: key, Value: []byte(c.incr)},
		}, res[:])
		r := res[1]
		got := string(r.Value)
		switch {
		case errors.Is(r.Err, ErrNotFloat):
			got = "ERR value is not a valid float"
		case errors.Is(r.Err, ErrIncrNaN):
			got = "ERR increment would produce NaN or Infinity"
		case r.Err != nil:
			got = r.Err.Error()
		}
		if got != c.want {
			t.Errorf("SET k %q, INCRBYFLOAT k %q = %q, redis-server %q", c.val, c.incr, got, c.want)
		}
		if r.Err == nil {
			e.Apply(1, []Op{{Code: OpGet, Key: key}}, res[:1])
			if string(res[0].Value) != c.want {
				t.Errorf("after INCRBYFLOAT k %q, GET k = %q, want %q", c.incr, res[0].Value, c.want)
			}
		}
	}
}

// TestIncrByFloatKeepsExpiryAndType: the expiry stays, a limiter key is
// WRONGTYPE (before the increment is looked at, as Redis), an absent key
// counts as 0.
func TestIncrByFloatKeepsExpiryAndType(t *testing.T) {
	e := New(Config{})
	var res [3]Result
	now := int64(1_000_000_000_000)
	e.Apply(now, []Op{
		{Code: OpIncrByFloat, Key: []byte("n"), Value: []byte("2.5")},
		{Code: OpExpire, Key: []byte("n"), Expire: 100, Flags: StrExpireRel},
		{Code: OpIncrByFloat, Key: []byte("n"), Value: []byte("0.25")},
	}, res[:])
	if string(res[0].Value) != "2.5" || string(res[2].Value) != "2.75" || res[2].Err != nil {
		t.Fatalf("results %+v", res)
	}
	e.Apply(now, []Op{{Code: OpTTL, Key: []byte("n")}}, res[:1])
	if res[0].TTL != 100 {
		t.Errorf("TTL after INCRBYFLOAT = %d, want 100", res[0].TTL)
	}
	e.Apply(now, []Op{
		{Code: OpDecide, Key: []byte("lim"), Rule: Rule{Kind: KindToken, Limit: 5, Period: 1e9}, Cost: 1},
		{Code: OpIncrByFloat, Key: []byte("lim"), Value: []byte("nope")},
	}, res[:2])
	if !errors.Is(res[1].Err, ErrWrongTypeValue) {
		t.Errorf("INCRBYFLOAT on a limiter key: %v, want WRONGTYPE", res[1].Err)
	}
}
