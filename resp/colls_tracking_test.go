package resp

import (
	"fmt"
	"testing"
)

// TestTrackingCollections: the reads of hashes, sorted sets and lists are
// tracked, and any change of the key invalidates them: a write, a removal
// of the last element (the key goes), an expiry change, a delete, and its
// expiry (a DEBUG TIMEWARP past it).
func TestTrackingCollections(t *testing.T) {
	addr := startServer(t, Config{EnableDebug: true})
	other := rawDial(t, addr)
	other.do(t, "DEBUG", "CLOCK", "FREEZE", fmt.Sprint(epoch2030)).expect(t, "+OK")
	a := trackingConn(t, addr)
	cases := []struct {
		create  []string
		reads   [][]string
		changes [][]string
	}{
		{[]string{"HSET", "k", "f", "1"},
			[][]string{{"HGET", "k", "f"}, {"HGETALL", "k"}, {"HLEN", "k"}, {"HMGET", "k", "f"}, {"HEXISTS", "k", "f"}},
			[][]string{{"HSET", "k", "g", "2"}, {"HINCRBY", "k", "f", "1"}, {"HDEL", "k", "f"}, {"EXPIRE", "k", "100"}, {"DEL", "k"}}},
		{[]string{"ZADD", "k", "1", "m"},
			[][]string{{"ZSCORE", "k", "m"}, {"ZRANGE", "k", "0", "-1"}, {"ZCARD", "k"}, {"ZRANK", "k", "m"}, {"ZCOUNT", "k", "-inf", "+inf"}},
			[][]string{{"ZADD", "k", "2", "n"}, {"ZREMRANGEBYSCORE", "k", "-inf", "+inf"}, {"ZPOPMIN", "k"}, {"PEXPIRE", "k", "100"}, {"DEBUG", "TIMEWARP", "11000"}}},
		{[]string{"RPUSH", "k", "x"},
			[][]string{{"LINDEX", "k", "0"}, {"LRANGE", "k", "0", "-1"}, {"LLEN", "k"}},
			[][]string{{"LPUSH", "k", "y"}, {"LPOP", "k"}, {"LTRIM", "k", "1", "0"}, {"LSET", "k", "0", "z"}, {"UNLINK", "k"}}},
	}
	for _, cs := range cases {
		for _, read := range cs.reads {
			for _, ch := range cs.changes {
				other.do(t, "DEL", "k")
				other.do(t, cs.create...)
				other.do(t, "EXPIRE", "k", "10")
				a.do(t, read...)
				other.do(t, ch...)
				if got := a.read(t); string(got) != push("k") {
					t.Fatalf("%s after %s: got %s, want %s", ch, read, got, push("k"))
				}
				other.do(t, cs.create...)
				a.expectQuiet(t)
			}
		}
	}
}
