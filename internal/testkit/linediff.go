package testkit

import (
	"strconv"
	"strings"
)

// LineDiff lists, by line number, the first limit lines where got differs
// from want (limit <= 0: all), each line labelled as the test names the two
// texts: a golden file's failure message without a diff tool.
func LineDiff(wantLabel, want, gotLabel, got string, limit int) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	width := max(len(wantLabel), len(gotLabel)) + 1
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl == gl {
			continue
		}
		if limit > 0 && shown == limit {
			break
		}
		b.WriteString("line " + strconv.Itoa(i+1) + ":\n")
		b.WriteString("  " + padRight(wantLabel+":", width) + " " + wl + "\n")
		b.WriteString("  " + padRight(gotLabel+":", width) + " " + gl + "\n")
		shown++
	}
	return b.String()
}

func padRight(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat(" ", n-len(s))
}
