package slots

import "testing"

// Values from a real redis-server 7 (CLUSTER KEYSLOT).
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		key  string
		slot int
	}{
		{"", 0},
		{"foo", 12182},
		{"bar", 5061},
		{"hello", 866},
		{"key", 12539},
		{"123456789", 12739}, // CRC16-XMODEM check value 0x31C3 % 16384
		{"somekey", 11058},
		{"foo{}{bar}", 8363},    // empty first tag: the whole key
		{"foo{{bar}}zap", 4015}, // tag is "{bar"
		{"foo{bar}{zap}", 5061}, // first tag only: "bar"
	} {
		if got := Of([]byte(tc.key)); got != tc.slot {
			t.Errorf("Of(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
}

// Keys sharing a hash tag share a slot: the one of the tag alone.
func TestOfHashTags(t *testing.T) {
	for _, group := range [][]string{
		{"{user1000}.following", "{user1000}.followers", "user1000", "x{user1000}y"},
		{"{foo", "{foo"},
		{"{}foo", "{}foo"},
	} {
		want := Of([]byte(group[0]))
		for _, k := range group[1:] {
			if got := Of([]byte(k)); got != want {
				t.Errorf("Of(%q) = %d, want %d as Of(%q)", k, got, want, group[0])
			}
		}
	}
	if Of([]byte("{foo")) == Of([]byte("foo")) || Of([]byte("{}foo")) == Of([]byte("foo")) {
		t.Error("a key without a non-empty tag must be hashed whole")
	}
}

func TestHashTag(t *testing.T) {
	for _, tc := range []struct{ key, tag string }{
		{"{a}b", "a"}, {"x{a}b", "a"}, {"{}a", "{}a"}, {"a{", "a{"}, {"a}{b}", "b"}, {"plain", "plain"},
	} {
		if got := string(HashTag([]byte(tc.key))); got != tc.tag {
			t.Errorf("HashTag(%q) = %q, want %q", tc.key, got, tc.tag)
		}
	}
}

func TestEven(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 16384} {
		tab, err := Even(n)
		if err != nil {
			t.Fatal(err)
		}
		if tab.Groups() != n {
			t.Fatalf("n=%d: %d groups", n, tab.Groups())
		}
		next := 0
		for g := range n {
			r := tab.Range(g)
			if r.First != next || r.Last < r.First {
				t.Fatalf("n=%d group %d: range %v after %d", n, g, r, next)
			}
			next = r.Last + 1
			for _, s := range []int{r.First, r.Last, (r.First + r.Last) / 2} {
				if got := tab.Group(s); got != g {
					t.Fatalf("n=%d: Group(%d) = %d, want %d", n, s, got, g)
				}
			}
		}
		if next != Count {
			t.Fatalf("n=%d: ranges end at %d", n, next)
		}
	}
	three, _ := Even(3)
	if r := three.Range(0); r != (Range{0, 5461}) {
		t.Fatalf("3 groups: first range %v, want 0-5461 as redis-cli --cluster create assigns", r)
	}
	for _, n := range []int{0, -1, Count + 1} {
		if _, err := Even(n); err == nil {
			t.Errorf("Even(%d) succeeded", n)
		}
	}
}
