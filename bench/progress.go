package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress draws a progress bar for a run of known planned length. On a
// terminal the bar is redrawn in place; elsewhere (a log, CI) one line is
// printed per finished step, and only when the whole run is planned to take
// longer than a few seconds. A nil *Progress does nothing.
type Progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	total   time.Duration // planned length of the run
	done    time.Duration // planned length of the steps finished
	step    string
	stepLen time.Duration
	started time.Time
	steps   int
	drawn   bool
}

// QuietBelow is the planned length under which a run draws nothing when
// stderr is not a terminal.
const QuietBelow = 5 * time.Second

// NewProgress returns a progress bar writing to w for a run planned to
// last total, or nil when nothing should be drawn.
func NewProgress(w io.Writer, total time.Duration) *Progress {
	tty := isTerminal(w)
	if !tty && total < QuietBelow {
		return nil
	}
	return &Progress{w: w, tty: tty, total: total, started: time.Now()}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Step announces the next step, planned to last d.
func (p *Progress) Step(name string, d time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step, p.stepLen = name, d
	p.steps++
	if p.tty {
		p.draw(0, "")
	}
}

// Update redraws the bar: frac of the current step is done; note is shown
// after the step's name (e.g. the current throughput).
func (p *Progress) Update(frac float64, note string) {
	if p == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(frac, note)
}

// Finish closes the current step with a result note.
func (p *Progress) Finish(note string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += p.stepLen
	if p.tty {
		p.draw(0, note)
		return
	}
	fmt.Fprintf(p.w, "[%3.0f%% %s] %s: %s\n", p.percent(0), p.elapsed(), p.step, note)
}

// Log prints a line above the bar.
func (p *Progress) Log(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
	p.drawn = false
}

// Close ends the bar.
func (p *Progress) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\n")
	}
	p.drawn = false
}

func (p *Progress) percent(frac float64) float64 {
	if p.total <= 0 {
		return 0
	}
	v := (float64(p.done) + frac*float64(p.stepLen)) / float64(p.total) * 100
	return min(v, 100)
}

func (p *Progress) elapsed() string {
	return time.Since(p.started).Round(time.Second).String()
}

func (p *Progress) draw(frac float64, note string) {
	const width = 30
	pct := p.percent(frac)
	n := int(pct / 100 * width)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	line := fmt.Sprintf("[%s] %3.0f%% %s %s", bar, pct, p.elapsed(), p.step)
	if note != "" {
		line += " " + note
	}
	if len(line) > 150 {
		line = line[:150]
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.drawn = true
}
