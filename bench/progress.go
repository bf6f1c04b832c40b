package bench

import (
	"fmt"
	"io"
	"time"
)

// Progress prints a line per finished step of a run: its name, what it
// measured, and the time since the run began. A nil *Progress prints
// nothing.
type Progress struct {
	w       io.Writer
	step    string
	started time.Time
}

// NewProgress returns a Progress writing to w.
func NewProgress(w io.Writer) *Progress { return &Progress{w: w, started: time.Now()} }

// Step announces the next step; d is how long it is planned to last.
func (p *Progress) Step(name string, d time.Duration) {
	if p != nil {
		p.step = name
	}
}

// Finish prints the step's line.
func (p *Progress) Finish(note string) {
	if p != nil {
		fmt.Fprintf(p.w, "[%s] %s: %s\n", time.Since(p.started).Round(time.Second), p.step, note)
	}
}
