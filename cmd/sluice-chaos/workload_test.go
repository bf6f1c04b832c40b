package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/slots"
)

// TestWorkloadKeysSpreadOverGroups: every key lands in the group its Group
// field names, every generation gives every group keys (zero-refill and
// refill ones with up to 3 groups), every kind of key visits every group
// over the generations, and one group keeps the plain names.
func TestWorkloadKeysSpreadOverGroups(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, groups := range []int{1, 2, 3, 4, 8, 9, 64} {
		for _, noFixed := range []bool{false, true} {
			t.Run(fmt.Sprintf("groups=%d/noFixed=%v", groups, noFixed), func(t *testing.T) {
				w, err := newWorkload(15*time.Second, 300, start, time.Minute, groups)
				if err != nil {
					t.Fatal(err)
				}
				w.noFixed = noFixed
				table, err := slots.Even(groups)
				if err != nil {
					t.Fatal(err)
				}
				names := map[string]bool{}
				visited := map[string]map[int]bool{} // template name -> groups
				gens := max(groups, 2)
				for g := range gens {
					keys, zero := make([]int, groups), make([]int, groups)
					for _, k := range w.generation(g) {
						if got := table.Group(slots.Of([]byte(k.Name))); got != k.Group {
							t.Fatalf("%s: in group %d, Group says %d", k.Name, got, k.Group)
						}
						if names[k.Name] {
							t.Fatalf("%s: named twice", k.Name)
						}
						names[k.Name] = true
						keys[k.Group]++
						if k.Zero {
							zero[k.Group]++
						}
						tmpl := k.Name[len(fmt.Sprintf("chaos:g%d:", g)):]
						if i := len(tmpl) - 1; groups > 1 {
							for i > 0 && tmpl[i] != '~' && tmpl[i] >= '0' && tmpl[i] <= '9' {
								i--
							}
							if tmpl[i] == '~' {
								tmpl = tmpl[:i]
							}
						} else if want := fmt.Sprintf("chaos:g%d:%s", g, tmpl); k.Name != want {
							t.Fatalf("one group: %q, want the plain %q", k.Name, want)
						}
						if visited[tmpl] == nil {
							visited[tmpl] = map[int]bool{}
						}
						visited[tmpl][k.Group] = true
					}
					for grp := range groups {
						switch {
						case groups <= 3 && (keys[grp] == zero[grp] || zero[grp] == 0):
							t.Errorf("generation %d: group %d has %d keys, %d zero-refill; want both kinds", g, grp, keys[grp], zero[grp])
						case groups <= 8 && keys[grp] == 0:
							t.Errorf("generation %d: group %d has no key", g, grp)
						}
					}
				}
				if len(visited) != len(keyTemplates())-map[bool]int{true: 1}[noFixed] {
					t.Fatalf("templates seen: %v", visited)
				}
				for tmpl, gs := range visited {
					if len(gs) != groups {
						t.Errorf("%s visited groups %v over %d generations, want all %d", tmpl, gs, gens, groups)
					}
				}
			})
		}
	}
}
