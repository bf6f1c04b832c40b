package script

import "testing"

// Scripts that would pin a CPU or grow memory inside a builtin, where the
// VM counts no instruction, end in an error (the budget's, or C Lua's
// own limit) instead.
func TestHostileBuiltins(t *testing.T) {
	rt := New(Config{}, testTexts)
	for _, tc := range []struct {
		script string
		want   Outcome
	}{
		{`return #{unpack({}, 1, 1e7)}`, Failed},                                                              // too many results to unpack
		{`local s = string.rep('x', 1e6) return #{string.byte(s, 1, -1)}`, Failed},                            // string slice too long
		{`return select('#', unpack({}, 1, 1e6))`, Failed},                                                    // too many results
		{`local t = setmetatable({}, {__index = function(t, k) return t[k+1] end}) return t[1]`, OutOfMemory}, // recursion
		{`local s = string.rep('a', 30000) return string.find(s, '.-.-.-.-b')`, OutOfSteps},                   // backtracking
		{`return cjson.decode(string.rep('[', 1e5))`, Failed},                                                 // nesting
		{`return loadstring(string.rep('x = 1 ', 1e6))`, OutOfSteps},                                          // compiling
		{`return tostring(setmetatable({}, {__tostring = function() return 'x' end}))`, Done},
	} {
		out, o := rt.Run("sha", []byte(tc.script), nil, nil, 2, &memHost{kv: map[string]string{}})
		if o != tc.want {
			t.Errorf("%s: outcome %d (%.100q), want %d", tc.script, o, out, tc.want)
		}
	}
}
