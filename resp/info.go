package resp

import (
	"cmp"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// INFO sections, as bits of pending.arg.
const (
	infoServer = 1 << iota
	infoClients
	infoMemory
	infoPersistence
	infoStats
	infoReplication
	infoKeyspace
	infoRaft
	infoCommandstats
	infoCluster
	infoRLS // Envoy's rate limit service (rls.go), with --rls-config only
	infoAll = 1<<iota - 1
	// infoDefault is INFO without arguments: every section but
	// commandstats, as in Redis.
	infoDefault = infoAll &^ infoCommandstats
)

var infoSectionNames = [...]string{"server", "clients", "memory", "persistence", "stats", "replication", "keyspace", "raft", "commandstats", "cluster", "rls"}

// errSyntax is Redis's generic syntax error.
func sortStrings(s []string) { slices.Sort(s) }

// runInfo selects INFO's sections; keyspace needs the executor's key count.
func runInfo(s *Server, c *client, args [][]byte, p *pending) {
	mask := int64(0)
	if len(args) == 1 {
		mask = infoDefault
	}
	for _, a := range args[1:] {
		name := strings.ToLower(string(a))
		switch name {
		case "all", "everything":
			mask = infoAll
			continue
		case "default":
			mask |= infoDefault
			continue
		}
		for i, n := range infoSectionNames {
			if n == name {
				mask |= 1 << i
			}
		}
	}
	if s.admin == nil {
		mask &^= infoRaft
	}
	if s.cfg.RLS == nil {
		mask &^= infoRLS
	}
	p.arg = mask
	// Always go through the executor, so that INFO reflects the same view
	// (and the same LOADING state) as the commands around it: one count per
	// database for the keyspace section.
	dbs := 1
	if mask&infoKeyspace != 0 && !s.sharded() {
		dbs = engine.NumDBs
	}
	for db := range dbs {
		c.enqueueDB(p, engine.Op{Code: engine.OpCount, DB: uint8(db)})
	}
}

// renderInfo writes the INFO text.
func renderInfo(s *Server, r *replyBuf, p *pending, results []engine.Result) {
	mask := p.arg
	var b strings.Builder
	section := func(bit int64, title string, fields ...string) {
		if mask&bit == 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + title + "\r\n")
		for i := 0; i+1 < len(fields); i += 2 {
			b.WriteString(fields[i] + ":" + fields[i+1] + "\r\n")
		}
	}
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	uptime := int64(time.Since(s.started) / time.Second)
	port := ""
	if a := s.Addr(); a != nil {
		if _, pstr, ok := strings.Cut(a.String(), "]:"); ok {
			port = pstr
		} else if i := strings.LastIndexByte(a.String(), ':'); i >= 0 {
			port = a.String()[i+1:]
		}
	}
	serverFields := []string{
		"redis_version", redisCompatVersion,
		"sluice_version", s.cfg.Version,
		"sluice_git_sha1", cmp.Or(s.cfg.GitSHA1, "00000000"),
		"sluice_git_dirty", strconv.FormatInt(b2i(s.cfg.GitDirty), 10),
		"redis_mode", s.redisMode(),
		"os", runtime.GOOS + " " + runtime.GOARCH,
		"arch_bits", "64",
		"go_version", runtime.Version(),
		"process_id", strconv.Itoa(os.Getpid()),
		"tcp_port", port,
		"uptime_in_seconds", itoa(uptime),
		"uptime_in_days", itoa(uptime / 86400)}
	if mask&infoServer != 0 && s.admin != nil {
		// The cluster version of the log (group 0's) and the highest this
		// binary supports: docs/operations.md, "Upgrading".
		for _, kv := range s.admin.Status(0) {
			if kv[0] == "cluster_version" || kv[0] == "cluster_version_supported" {
				serverFields = append(serverFields, kv[0], kv[1])
			}
		}
	}
	section(infoServer, "Server", serverFields...)
	section(infoClients, "Clients",
		"connected_clients", itoa(s.connected.Load()),
		"maxclients", strconv.Itoa(s.cfg.MaxClients))
	if mask&infoMemory != 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		var engBytes, maxKeys, maxBytes, scriptBytes int64
		var scripts int
		if eng := s.cfg.Engine; eng != nil {
			engBytes = eng.MemoryBytes()
			maxKeys, maxBytes = eng.Limits()
			if ss, ok := eng.(interface{ ScriptStats() (int, int64) }); ok {
				scripts, scriptBytes = ss.ScriptStats()
			}
		}
		section(infoMemory, "Memory",
			"used_memory", strconv.FormatUint(ms.HeapAlloc, 10),
			"used_memory_rss", strconv.FormatUint(ms.Sys-ms.HeapReleased, 10),
			"used_memory_peak", strconv.FormatUint(ms.HeapSys, 10),
			"used_memory_engine", itoa(engBytes),
			"maxmemory", itoa(maxBytes),
			"maxmemory_policy", "noeviction",
			"max_keys", itoa(maxKeys),
			"used_memory_scripts", itoa(scriptBytes),
			"number_of_cached_scripts", strconv.Itoa(scripts))
	}
	loading := "0"
	if err := results[0].Err; (err != nil && errcode.Is(err, errcode.Loading)) || s.starting() != nil {
		loading = "1"
	}
	aof := "0"
	if s.cfg.Persistent {
		aof = "1"
	}
	section(infoPersistence, "Persistence",
		"loading", loading,
		"aof_enabled", aof,
		"appendfsync", s.cfg.appendFsync(),
		"raft_log_store", s.cfg.logStore(),
		"rdb_changes_since_last_save", "0")
	if mask&infoStats != 0 {
		var allowed, denied, errored, failed int64
		for _, st := range s.metrics.byName {
			failed += counterValue(st.failed)
			if st.decision {
				allowed += counterValue(st.allowed)
				denied += counterValue(st.denied)
				errored += counterValue(st.errored)
			}
		}
		section(infoStats, "Stats",
			"total_connections_received", itoa(s.connsTotal.Load()),
			"total_commands_processed", itoa(s.commandsTotal.Load()),
			"rejected_connections", itoa(s.rejectedConns.Load()),
			"total_error_replies", itoa(failed),
			"total_decisions_allowed", itoa(allowed),
			"total_decisions_denied", itoa(denied),
			"total_decisions_errors", itoa(errored),
			"total_oom_rejections", itoa(counterValue(s.metrics.oom)))
	}
	section(infoReplication, "Replication",
		"role", "master",
		"connected_slaves", "0")
	clusterEnabled := "0"
	if s.clusterOn {
		clusterEnabled = "1"
	}
	section(infoCluster, "Cluster", "cluster_enabled", clusterEnabled)
	if mask&infoKeyspace != 0 {
		fields := []string{}
		for db := range results {
			if n := results[db].Count; n > 0 && results[db].Err == nil {
				fields = append(fields, "db"+itoa(int64(db)), "keys="+itoa(n)+",expires="+itoa(n)+",avg_ttl=0")
			}
		}
		section(infoKeyspace, "Keyspace", fields...)
	}
	if mask&infoRaft != 0 && s.admin != nil {
		var fields []string
		for _, kv := range s.admin.Status(0) {
			fields = append(fields, "raft_"+kv[0], kv[1])
		}
		if groups := s.admin.Groups(); groups > 1 {
			// Every group's role and leader, in the form Redis gives
			// db0 in the keyspace section.
			fields = append(fields, "raft_groups", itoa(int64(groups)))
			for g := range groups {
				var b strings.Builder
				for _, kv := range s.admin.Status(g) {
					switch kv[0] {
					case "role", "leader_id", "term", "commit_index", "applied_index", "cluster_version":
						if b.Len() > 0 {
							b.WriteByte(',')
						}
						b.WriteString(kv[0] + "=" + kv[1])
					}
				}
				fields = append(fields, "raft_group"+strconv.Itoa(g), b.String())
			}
		}
		section(infoRaft, "Raft", fields...)
	}
	if mask&infoRLS != 0 {
		section(infoRLS, "Rls", rlsInfoFields(s.cfg.RLS)...)
	}
	if mask&infoCommandstats != 0 {
		var fields []string
		names := make([]string, 0, len(s.metrics.byName))
		for name := range s.metrics.byName {
			names = append(names, name)
		}
		sortStrings(names)
		for _, name := range names {
			st := s.metrics.byName[name]
			calls := counterValue(st.calls)
			if calls == 0 {
				continue
			}
			usec := int64(histogramSum(st.latency) * 1e6)
			v := "calls=" + itoa(calls) + ",usec=" + itoa(usec) +
				",usec_per_call=" + strconv.FormatFloat(float64(usec)/float64(calls), 'f', 2, 64) +
				",rejected_calls=0,failed_calls=" + itoa(counterValue(st.failed))
			if st.decision {
				v += ",allowed=" + itoa(counterValue(st.allowed)) + ",denied=" + itoa(counterValue(st.denied))
			}
			fields = append(fields, "cmdstat_"+name, v)
		}
		section(infoCommandstats, "Commandstats", fields...)
	}
	r.Verbatim(b.String())
}
