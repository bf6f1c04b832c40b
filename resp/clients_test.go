package resp

import (
	"context"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestGoRedisBothProtocols drives the limiter commands, keyspace commands
// and the handshake with go-redis over RESP2 and RESP3.
func TestGoRedisBothProtocols(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			addr := debugServer(t, epoch2030)
			rdb := newClient(t, addr, proto)

			got, err := rdb.Do(ctx, "RL.TOKEN", "user:1", 4, "4/m").Int64Slice()
			if err != nil || !reflect.DeepEqual(got, []int64{1, 4, 3, 0, 15000}) {
				t.Fatalf("RL.TOKEN = %v, %v", got, err)
			}
			got, err = rdb.Do(ctx, "CL.THROTTLE", "cell", 15, 30, 60).Int64Slice()
			if err != nil || !reflect.DeepEqual(got, []int64{0, 16, 15, -1, 2}) {
				t.Fatalf("CL.THROTTLE = %v, %v", got, err)
			}
			got, err = rdb.Do(ctx, "RL.PEEK", "cell").Int64Slice()
			if err != nil || !reflect.DeepEqual(got, []int64{0, 16, 15, -1, 2}) {
				t.Fatalf("RL.PEEK of a CL.THROTTLE key = %v, %v", got, err)
			}
			if _, err := rdb.Do(ctx, "RL.PEEK", "absent").Result(); err != redis.Nil {
				t.Fatalf("RL.PEEK of an absent key: err %v, want redis.Nil", err)
			}
			if n, err := rdb.Exists(ctx, "user:1", "cell", "absent").Result(); err != nil || n != 2 {
				t.Fatalf("EXISTS = %d, %v", n, err)
			}
			if typ, err := rdb.Type(ctx, "cell").Result(); err != nil || typ != "gcra" {
				t.Fatalf("TYPE = %q, %v", typ, err)
			}
			if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 2 {
				t.Fatalf("DBSIZE = %d, %v", n, err)
			}
			keys, err := rdb.Keys(ctx, "user:*").Result()
			if err != nil || !reflect.DeepEqual(keys, []string{"user:1"}) {
				t.Fatalf("KEYS = %v, %v", keys, err)
			}
			var scanned []string
			iter := rdb.Scan(ctx, 0, "*", 1).Iterator()
			for iter.Next(ctx) {
				scanned = append(scanned, iter.Val())
			}
			if err := iter.Err(); err != nil || len(scanned) != 2 {
				t.Fatalf("SCAN = %v, %v", scanned, err)
			}
			tm, err := rdb.Time(ctx).Result()
			if err != nil || tm.UnixMilli() != epoch2030 {
				t.Fatalf("TIME = %v (%d), %v; want the frozen %d", tm, tm.UnixMilli(), err, epoch2030)
			}
			if err := rdb.Do(ctx, "DEBUG", "TIMEWARP", 1500).Err(); err != nil {
				t.Fatal(err)
			}
			if tm, _ := rdb.Time(ctx).Result(); tm.UnixMilli() != epoch2030+1500 {
				t.Fatalf("TIME after TIMEWARP 1500 = %d", tm.UnixMilli())
			}
			if n, err := rdb.Del(ctx, "user:1", "absent").Result(); err != nil || n != 1 {
				t.Fatalf("DEL = %d, %v", n, err)
			}
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
				t.Fatalf("DBSIZE after FLUSHALL = %d", n)
			}
			info, err := rdb.Info(ctx, "persistence", "keyspace").Result()
			if err != nil || !strings.Contains(info, "loading:0") {
				t.Fatalf("INFO = %q, %v", info, err)
			}
			if err := rdb.Do(ctx, "RL.FIXED", "k", 5, "1m").Err(); err != nil {
				t.Fatal(err)
			}
			err = rdb.Do(ctx, "RL.TOKEN", "k", 5, "1/s").Err()
			if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
				t.Fatalf("WRONGTYPE expected, got %v", err)
			}
		})
	}
}

// TestHelloReplies checks the handshake replies in both protocols: redis-py
// 8 requires proto 3 in a RESP3 map.
func TestHelloReplies(t *testing.T) {
	addr := startServer(t, Config{})
	c := rawDial(t, addr)
	got := string(c.do(t, "HELLO", "3", "SETNAME", "app"))
	if !strings.HasPrefix(got, "%7 [$6 server $6 sluice $7 version ") || !strings.Contains(got, "$5 proto :3 $2 id :") {
		t.Fatalf("HELLO 3 = %q", got)
	}
	c.do(t, "CLIENT", "GETNAME").expect(t, "$3 app")
	c.do(t, "RL.PEEK", "nothing").expect(t, "_")
	got = string(c.do(t, "HELLO", "2"))
	if !strings.HasPrefix(got, "*14 [$6 server") {
		t.Fatalf("HELLO 2 = %q", got)
	}
	c.do(t, "RL.PEEK", "nothing").expect(t, "$-1")
	c.do(t, "CLIENT", "SETINFO", "LIB-NAME", "redis-py").expect(t, "+OK")
	if got := string(c.do(t, "CLIENT", "INFO")); !strings.Contains(got, "lib-name=redis-py") || !strings.Contains(got, "name=app") {
		t.Fatalf("CLIENT INFO = %q", got)
	}
	c.do(t, "SELECT", "0").expect(t, "+OK")
	c.do(t, "PING").expect(t, "+PONG")
	c.do(t, "ECHO", "hi").expect(t, "$2 hi")
	c.do(t, "RESET").expect(t, "+RESET")
	c.do(t, "CLIENT", "GETNAME").expect(t, "$-1")
	c.do(t, "QUIT").expect(t, "+OK")
}

// TestAuth checks that go-redis authenticates with a password (HELLO 3
// AUTH on connect); the replies of AUTH, HELLO and NOAUTH are in
// testdata/transcripts/auth.txt.
func TestAuth(t *testing.T) {
	addr := startServer(t, Config{RequirePass: "s3cret"})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret", Protocol: 3})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("go-redis with password: %v", err)
	}
}

// TestPipelineOrder sends a pipeline mixing local and engine commands, an
// error and a protocol switch, and checks every reply comes in order.
func TestPipelineOrder(t *testing.T) {
	addr := debugServer(t, epoch2030)
	c := rawDial(t, addr)
	var b strings.Builder
	want := []string{}
	for i := 0; i < 50; i++ {
		b.WriteString(encode("RL.FIXED", "p", "30", "1m"))
		if i < 30 {
			want = append(want, ints(1, 30, int64(29-i), 0, 60000))
		} else {
			want = append(want, ints(0, 30, 0, 60000, 60000))
		}
		b.WriteString(encode("PING", fmt.Sprint(i)))
		want = append(want, fmt.Sprintf("$%d %d", len(fmt.Sprint(i)), i))
	}
	b.WriteString(encode("RL.FIXED", "p", "x", "1m"))
	want = append(want, "-ERR invalid limit 'x'")
	b.WriteString(encode("HELLO", "3"))
	want = append(want, "%7 ")
	b.WriteString(encode("RL.PEEK", "none"))
	want = append(want, "_")
	c.send(t, b.String())
	for i, w := range want {
		got := string(c.read(t))
		if !strings.HasPrefix(got, w) {
			t.Fatalf("reply %d = %q, want %q", i, got, w)
		}
	}
}

// TestConcurrentExactness: many connections racing on one key admit exactly
// the limit, for every algorithm.
func TestConcurrentExactness(t *testing.T) {
	addr := debugServer(t, epoch2030)
	const conns, perConn = 20, 50
	cases := [][]string{
		{"RL.TOKEN", "tok", "137", "1/d"},
		{"RL.LEAKY", "lky", "137", "1/d"},
		{"RL.FIXED", "fix", "137", "1d"},
		{"RL.SLIDING", "sld", "137", "1d"},
		{"RL.LOG", "log", "137", "1d"},
		{"CL.THROTTLE", "gcra", "136", "1", "86400"},
	}
	for _, args := range cases {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
				defer rdb.Close()
				cmds := make([]any, len(args))
				for i, a := range args {
					cmds[i] = a
				}
				for j := 0; j < perConn; j++ {
					res, err := rdb.Do(context.Background(), cmds...).Int64Slice()
					if err != nil {
						t.Error(err)
						return
					}
					ok := res[0] == 1
					if args[0] == "CL.THROTTLE" {
						ok = res[0] == 0
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := admitted.Load(); got != 137 {
			t.Errorf("%s: admitted %d of %d requests, want exactly 137", args[0], got, conns*perConn)
		}
	}
}

// TestRedisCLI runs the real redis-cli against the server.
func TestRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed (.ci/run installs redis-tools)")
	}
	addr := debugServer(t, epoch2030)
	host, port, _ := strings.Cut(addr, ":")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("RL.TOKEN", "user:1", "10", "1/s"); got != "1\n10\n9\n0\n1000" {
		t.Fatalf("redis-cli RL.TOKEN = %q", got)
	}
	if got := run("-3", "RL.TOKEN", "user:1", "10", "1/s"); got != "1) (integer) 1\n2) (integer) 10\n3) (integer) 8\n4) (integer) 0\n5) (integer) 2000" &&
		got != "1\n10\n8\n0\n2000" {
		t.Fatalf("redis-cli -3 RL.TOKEN = %q", got)
	}
	if got := run("PING"); got != "PONG" {
		t.Fatalf("redis-cli PING = %q", got)
	}
	docs := run("COMMAND", "DOCS", "rl.token")
	for _, want := range []string{"rl.token", "summary", "arguments", "capacity", "rate", "COST"} {
		if !strings.Contains(docs, want) {
			t.Fatalf("COMMAND DOCS rl.token lacks %q:\n%s", want, docs)
		}
	}
	if got := run("COMMAND", "COUNT"); got == "0" || got == "" {
		t.Fatalf("COMMAND COUNT = %q", got)
	}
	if got := run("CONFIG", "GET", "save"); got != "save" {
		t.Fatalf("CONFIG GET save = %q", got)
	}
}

// TestClientList: CLIENT LIST lists every connection in ID order, TYPE
// normal the same, ID the connections asked for; CLIENT INFO is the
// asking connection's line of it. The filters' errors and the types that
// list nothing are in testdata/transcripts/subcommands_more.txt.
func TestClientList(t *testing.T) {
	addr := startServer(t, Config{})
	a, b := rawDial(t, addr), rawDial(t, addr)
	a.do(t, "CLIENT", "SETNAME", "first").expect(t, "+OK")
	b.do(t, "CLIENT", "SETNAME", "second").expect(t, "+OK")
	idA, idB := string(a.do(t, "CLIENT", "ID")), string(b.do(t, "CLIENT", "ID"))
	idA, idB = strings.TrimPrefix(idA, ":"), strings.TrimPrefix(idB, ":")
	lines := func(r reply) []string {
		s := string(r)
		if i := strings.Index(s, " "); i >= 0 { // "$N txt:..." or "=N txt:..."
			s = s[i+1:]
		}
		s = strings.TrimPrefix(s, "txt:")
		return strings.FieldsFunc(strings.ReplaceAll(s, `\n`, "\n"), func(r rune) bool { return r == '\n' })
	}
	for _, args := range [][]string{{"CLIENT", "LIST"}, {"CLIENT", "LIST", "TYPE", "normal"}, {"CLIENT", "LIST", "ID", idB, idA, "999999"}} {
		got := lines(a.do(t, args...))
		if len(got) != 2 || !strings.HasPrefix(got[0], "id="+idA+" ") || !strings.Contains(got[0], " name=first ") ||
			!strings.HasPrefix(got[1], "id="+idB+" ") || !strings.Contains(got[1], " name=second ") {
			t.Fatalf("%v = %q, want the two connections in ID order", args, got)
		}
	}
	got := lines(b.do(t, "CLIENT", "LIST", "ID", idB))
	if len(got) != 1 || !strings.HasPrefix(got[0], "id="+idB+" ") {
		t.Fatalf("CLIENT LIST ID %s = %q", idB, got)
	}
	info := lines(b.do(t, "CLIENT", "INFO"))
	if len(info) != 1 || !strings.HasPrefix(info[0], "id="+idB+" ") || !strings.Contains(info[0], " name=second ") {
		t.Fatalf("CLIENT INFO = %q", info)
	}
}
