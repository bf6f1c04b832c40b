package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// ReadMachine describes this machine.
func ReadMachine(redisBin, dataDir string) Machine {
	if dataDir == "" {
		dataDir = os.TempDir()
	}
	m := Machine{
		NProc:        runtime.NumCPU(),
		CPUModel:     cpuModel(),
		Kernel:       strings.TrimSpace(readFileString("/proc/sys/kernel/osrelease")),
		GoVersion:    runtime.Version(),
		RedisVersion: RedisVersion(redisBin),
		LoadStart:    loadAvg(),
		DataDir:      dataDir,
		DataFS:       FSType(dataDir),
	}
	if f := strings.Fields(procField("/proc/meminfo", "MemTotal")); len(f) > 0 {
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		m.MemTotal = kb * 1024
	}
	return m
}

func readFileString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// procField is the value of "name: value" in a /proc file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func cpuModel() string {
	if s := procField("/proc/cpuinfo", "model name"); s != "" {
		return s
	}
	return runtime.GOARCH
}

func loadAvg() float64 {
	f := strings.Fields(readFileString("/proc/loadavg"))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// CPUMeter measures the CPU time the rest of the machine uses while a run
// goes on: the machine's busy time (/proc/stat) less this process's and its
// waited-for children's (the servers it started and stopped).
type CPUMeter struct {
	start    time.Time
	busy     float64
	own      float64
	disabled bool
}

// StartCPUMeter starts measuring.
func StartCPUMeter() *CPUMeter {
	b, err := machineBusy()
	return &CPUMeter{start: time.Now(), busy: b, own: ownCPU(), disabled: err != nil}
}

// Stop reports the other processes' CPU in core-seconds and as a share of
// the machine over the measured time. Call it after the servers have been
// stopped, so that their time counts as ours.
func (c *CPUMeter) Stop() (seconds, share float64) {
	if c.disabled {
		return -1, -1
	}
	b, err := machineBusy()
	if err != nil {
		return -1, -1
	}
	other := (b - c.busy) - (ownCPU() - c.own)
	other = max(other, 0)
	wall := time.Since(c.start).Seconds() * float64(runtime.NumCPU())
	if wall <= 0 {
		return other, 0
	}
	return other, other / wall
}

// machineBusy is the machine's non-idle CPU time in seconds since boot.
func machineBusy() (float64, error) {
	line := strings.SplitN(readFileString("/proc/stat"), "\n", 2)[0]
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy float64
	for i, s := range f[1:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; guest time is already in user
			continue
		}
		busy += v
	}
	return busy / 100, nil // USER_HZ is 100 on Linux
}

// ownCPU is this process's and its waited-for children's CPU time, seconds.
func ownCPU() float64 {
	var total float64
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err == nil {
			total += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		}
	}
	return total
}

// ProcessCPU is the CPU time (user + system) the processes pids have used,
// in seconds, from /proc/PID/stat.
func ProcessCPU(pids []int) (float64, error) {
	var total float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("process cpu: %w", err)
		}
		// the command name, in parentheses, may hold spaces: count fields after it
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0, fmt.Errorf("process cpu: unexpected /proc/%d/stat", pid)
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			return 0, fmt.Errorf("process cpu: short /proc/%d/stat", pid)
		}
		ut, err1 := strconv.ParseFloat(f[11], 64) // utime, field 14
		st, err2 := strconv.ParseFloat(f[12], 64) // stime, field 15
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("process cpu: bad /proc/%d/stat", pid)
		}
		total += (ut + st) / 100 // USER_HZ
	}
	return total, nil
}

// selfCPU is this process's CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
