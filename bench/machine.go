package bench

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/prometheus/procfs"
)

// Machine describes where a run took place.
type Machine struct {
	NProc        int     `json:"nproc"`
	CPUModel     string  `json:"cpu_model"`
	MemTotal     int64   `json:"mem_total_bytes"`
	Kernel       string  `json:"kernel"`
	GoVersion    string  `json:"go_version"`
	RedisVersion string  `json:"redis_version"`
	Sluice       string  `json:"sluice"`         // version, binary and its build time
	LoadStart    float64 `json:"load_avg_start"` // 1-minute load average before the run
	DataDir      string  `json:"data_dir"`       // where the durable targets keep their data
	DataFS       string  `json:"data_fs"`
}

// ReadMachine describes this machine (from /proc, through procfs) and the
// servers' binaries.
func ReadMachine(cfg ServerConfig) Machine {
	dataDir := cmp.Or(cfg.WorkDir, os.TempDir())
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m := Machine{NProc: runtime.NumCPU(), CPUModel: runtime.GOARCH, Kernel: strings.TrimSpace(string(kernel)), GoVersion: runtime.Version(),
		RedisVersion: version(cfg.RedisBin), Sluice: version(cfg.SluiceBin), LoadStart: -1, DataDir: dataDir, DataFS: "unknown"}
	if fi, err := os.Stat(cfg.SluiceBin); err == nil {
		m.Sluice += fmt.Sprintf(" (%s, built %s)", cfg.SluiceBin, fi.ModTime().UTC().Format("2006-01-02 15:04 MST"))
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return m
	}
	if ci, err := fs.CPUInfo(); err == nil && len(ci) > 0 && ci[0].ModelName != "" {
		m.CPUModel = ci[0].ModelName
	}
	if mi, err := fs.Meminfo(); err == nil && mi.MemTotalBytes != nil {
		m.MemTotal = int64(*mi.MemTotalBytes)
	}
	if la, err := fs.LoadAvg(); err == nil {
		m.LoadStart = la.Load1
	}
	// The durable figures depend on what an fsync costs where the data is.
	if mounts, err := procfs.GetMounts(); err == nil {
		best := ""
		for _, mt := range mounts {
			if strings.HasPrefix(dataDir, mt.MountPoint) && len(mt.MountPoint) >= len(best) {
				best, m.DataFS = mt.MountPoint, mt.FSType
			}
		}
		if m.DataFS == "tmpfs" {
			m.DataFS += " (in memory: fsync costs nothing)"
		}
	}
	return m
}

// version is what a server binary's --version says: redis-server's v=
// field, or sluice's second word.
func version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	f := strings.Fields(string(out))
	for _, w := range f {
		if v, ok := strings.CutPrefix(w, "v="); ok {
			return v
		}
	}
	if len(f) < 2 {
		return strings.TrimSpace(string(out))
	}
	return f[1]
}

// ProcessCPU is the CPU time (user + system) the processes pids have used,
// in seconds (/proc/PID/stat).
func ProcessCPU(pids []int) (float64, error) {
	var total float64
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return 0, err
		}
		st, err := p.Stat()
		if err != nil {
			return 0, err
		}
		total += st.CPUTime()
	}
	return total, nil
}

// ProcessRSS is the resident set size (VmRSS in /proc/PID/status) of the
// processes pids, summed, in bytes.
func ProcessRSS(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return 0, fmt.Errorf("rss: %w", err)
		}
		st, err := p.NewStatus()
		if err != nil {
			return 0, fmt.Errorf("rss: %w", err)
		}
		sum += int64(st.VmRSS)
	}
	return sum, nil
}
