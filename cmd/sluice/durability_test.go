package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestDurabilityAtStartup: a durable node started with --raft-log wal
// --fsync everysec reports both, keeps its decisions across a restart, and
// refuses to start on the same data dir with the other log store, naming
// both stores; with no --raft-log a node keeps its data dir's store, and a
// new data dir gets wal.
func TestDurabilityAtStartup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a := freeSoloAddrs(t)
	start := func(args ...string) (stop func() error) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, append(append(a.flags(), "--data-dir", dir, "--log-level", "error"), args...), io.Discard)
		}()
		return func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(20 * time.Second):
				return fmt.Errorf("run did not return")
			}
		}
	}
	client := redis.NewClient(&redis.Options{Addr: a.addr, MaxRetries: -1})
	defer client.Close()
	ctx := context.Background()
	admitted := func() int64 {
		t.Helper()
		var res []int64
		testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
			var err error
			if res, err = client.Do(ctx, "RL.TOKEN", "k", 3, "1/d").Int64Slice(); err != nil {
				return fmt.Errorf("RL.TOKEN: %w", err)
			}
			return nil
		})
		return res[0]
	}

	stop := start("--raft-log", "wal", "--fsync", "everysec")
	for i := 0; i < 3; i++ {
		if admitted() != 1 {
			t.Fatalf("request %d denied", i+1)
		}
	}
	info, err := client.Info(ctx, "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"appendfsync:everysec", "raft_log_store:wal", "aof_enabled:1"} {
		if !strings.Contains(info, want) {
			t.Fatalf("INFO persistence lacks %s:\n%s", want, info)
		}
	}
	if got, err := client.ConfigGet(ctx, "appendfsync").Result(); err != nil || got["appendfsync"] != "everysec" {
		t.Fatalf("CONFIG GET appendfsync = %v, %v", got, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	// Refused before it serves: run returns at once (a node that started
	// would run until the context ends, and return nil).
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = run(rctx, append(a.flags(), "--data-dir", dir, "--log-level", "error", "--raft-log", "bolt"), io.Discard)
	cancel()
	if err == nil || !strings.Contains(err.Error(), `"wal"`) || !strings.Contains(err.Error(), `"bolt"`) {
		t.Fatalf("bolt on a wal data dir: %v, want a refusal naming both stores", err)
	}

	stop = start("--raft-log", "wal")
	if admitted() != 0 {
		t.Fatal("after a restart the spent bucket admitted a request")
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}

	// With no --raft-log, a node keeps the store its data dir holds (so a
	// data dir made when bolt was the default keeps working), and a new
	// data dir gets wal.
	store := func() string {
		t.Helper()
		admitted()
		info, err := client.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(info, "raft_log_store:")
		v, _, _ := strings.Cut(rest, "\r\n")
		return v
	}
	for _, made := range []string{"bolt", ""} {
		dir = filepath.Join(t.TempDir(), "data-"+made)
		args := []string{}
		if made != "" {
			args = []string{"--raft-log", made}
		}
		stop = start(args...)
		want := made
		if want == "" {
			want = "wal"
		}
		if got := store(); got != want {
			t.Fatalf("a new data dir started with %q: store %q, want %q", args, got, want)
		}
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		stop = start()
		if got := store(); got != want {
			t.Fatalf("a %s data dir restarted with no --raft-log: store %q", want, got)
		}
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
}

// run starts the server in process and blocks until ctx is done, then
// stops gracefully (runGraceful with no deadline on the stop).
func run(ctx context.Context, args []string, stderr io.Writer) error {
	return runGraceful(ctx, context.Background(), args, stderr)
}
