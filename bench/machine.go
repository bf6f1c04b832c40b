package bench

import (
	"cmp"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

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
	Sluice       string  `json:"sluice"`         // version and binary
	LoadStart    float64 `json:"load_avg_start"` // 1-minute load average before the run
	DataDir      string  `json:"data_dir"`       // where the durable targets keep their data
	DataFS       string  `json:"data_fs"`
	// OtherCPU is the CPU time other processes used during the run, in
	// core-seconds, and OtherShare that time over the run's length and
	// the machine's cores: how shared the machine was.
	OtherCPU   float64 `json:"other_cpu_seconds"`
	OtherShare float64 `json:"other_cpu_share"`
}

// ReadMachine describes this machine (from /proc, through procfs).
func ReadMachine(redisBin, dataDir string) Machine {
	dataDir = cmp.Or(dataDir, os.TempDir())
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m := Machine{NProc: runtime.NumCPU(), CPUModel: runtime.GOARCH, Kernel: strings.TrimSpace(string(kernel)), GoVersion: runtime.Version(),
		RedisVersion: RedisVersion(redisBin), LoadStart: -1, DataDir: dataDir, DataFS: "unknown"}
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

// CPUMeter measures the CPU time the rest of the machine uses while a run
// goes on: the machine's busy time (/proc/stat) less this process's and its
// waited-for children's (the servers it started and stopped).
type CPUMeter struct {
	start     time.Time
	busy, own float64
	err       error
}

// StartCPUMeter starts measuring.
func StartCPUMeter() *CPUMeter {
	b, err := machineBusy()
	return &CPUMeter{start: time.Now(), busy: b, own: ownCPU(), err: err}
}

// Stop reports the other processes' CPU in core-seconds and as a share of
// the machine over the measured time, -1 when unknown. Call it after the
// servers have been stopped, so that their time counts as ours.
func (c *CPUMeter) Stop() (seconds, share float64) {
	b, err := machineBusy()
	if c.err != nil || err != nil {
		return -1, -1
	}
	other := max((b-c.busy)-(ownCPU()-c.own), 0)
	return other, other / max(time.Since(c.start).Seconds()*float64(runtime.NumCPU()), 1e-9)
}

// machineBusy is the machine's non-idle CPU time in seconds since boot
// (guest time is already in user).
func machineBusy() (float64, error) {
	st, err := procfs.NewStat()
	c := st.CPUTotal
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal, err
}

// ownCPU is this process's and its waited-for children's CPU time, seconds.
func ownCPU() float64 {
	var total float64
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		}
	}
	return total
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

// ReadRSS is a process's resident set size in bytes (VmRSS in
// /proc/PID/status).
func ReadRSS(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	return int64(st.VmRSS), err
}
