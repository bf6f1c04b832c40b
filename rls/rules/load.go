package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds one rules file; a larger one is a load error.
const MaxFileBytes = 16 << 20

// LoadError is a rules file that could not be loaded: the file, the
// descriptor path within it (the domain, then each level's key or
// key_value, as envoyproxy/ratelimit names a rule; empty for the file's
// top level) and the field, with the reason.
type LoadError struct {
	File   string
	Path   string
	Field  string
	Reason string
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Path != "" {
		fmt.Fprintf(&b, ": descriptor %q", e.Path)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// LoadDir reads every *.yaml and *.yml file of dir (not its subdirectories),
// in name order, one domain per file. Any error in any file fails the whole
// load: the caller keeps its previous Set.
func LoadDir(dir string) (*Set, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rls rules: %w", err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rls rules: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if st.Size() > MaxFileBytes {
			return nil, &LoadError{File: name, Reason: fmt.Sprintf("file is %d bytes, more than %d", st.Size(), MaxFileBytes)}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("rls rules: %w", err)
		}
		files[name] = b
	}
	return Parse(files)
}

// Parse loads rules from file contents keyed by file name (the names are
// only for errors and listings), in name order.
func Parse(files map[string][]byte) (*Set, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	s := &Set{domains: map[string]*Domain{}}
	for _, name := range names {
		d, err := parseFile(name, files[name])
		if err != nil {
			return nil, err
		}
		if prev, ok := s.domains[d.Name]; ok {
			return nil, &LoadError{File: name, Field: "domain", Reason: fmt.Sprintf("duplicate domain %q (also in %s)", d.Name, prev.File)}
		}
		s.domains[d.Name] = d
		s.order = append(s.order, d.Name)
	}
	slices.Sort(s.order)
	s.version = s.hash()
	return s, nil
}

// hash is the Set's version: SHA-256 over a canonical listing of every
// domain's rules, first 16 hex digits.
func (s *Set) hash() string {
	h := sha256.New()
	for _, n := range s.order {
		d := s.domains[n]
		fmt.Fprintf(h, "domain %q\n", d.Name)
		d.root.canon(h, "")
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (n *node) canon(w interface{ Write([]byte) (int, error) }, prefix string) {
	keys := make([]string, 0, len(n.children))
	for k := range n.children {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(w, "%swildcards %q\n", prefix, n.wildcards)
	for _, k := range keys {
		c := n.children[k]
		fmt.Fprintf(w, "%s%q metric=%t share=%t", prefix, k, c.valueToMetric, c.shareThreshold)
		if l := c.limit; l != nil {
			fmt.Fprintf(w, " limit{%d %s %q %s unlimited=%t replaces=%q shadow=%t detailed=%t}",
				l.RequestsPerUnit, l.Unit, l.Name, l.Algorithm, l.Unlimited, l.Replaces, l.ShadowMode, l.DetailedMetric)
		}
		fmt.Fprintln(w)
		c.canon(w, prefix+"  ")
	}
}

// The fields the format has, per level.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold"}
	rateLimitFields  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm"}
	replacesFields   = []string{"name"}
)

// unsupported are envoyproxy/ratelimit's fields that sluice refuses by name.
var unsupported = map[string]string{
	"quota_mode": "quota_mode is not supported by sluice (SPEC section 12)",
}

type loader struct {
	file string
}

func (l *loader) errf(path, field, format string, args ...any) error {
	return &LoadError{File: l.file, Path: path, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func parseFile(name string, data []byte) (*Domain, error) {
	l := &loader{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, l.errf("", "", "not valid YAML: %v", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, l.errf("", "", "empty file: expected a mapping with domain and descriptors")
	}
	root := doc.Content[0]
	fields, err := l.mapping(root, "", "", rootFields)
	if err != nil {
		return nil, err
	}
	d := &Domain{File: name}
	if d.Name, err = l.str(fields["domain"], "", "domain"); err != nil {
		return nil, err
	}
	if d.Name == "" {
		return nil, l.errf("", "domain", "the domain must not be empty")
	}
	d.root.children = map[string]*node{}
	if err := l.descriptors(d, &d.root, fields["descriptors"], d.Name, "descriptors"); err != nil {
		return nil, err
	}
	return d, nil
}

// mapping checks that n is a mapping whose keys are all in allowed (and not
// repeated) and returns the values by key. field names n itself.
func (l *loader) mapping(n *yaml.Node, path, field string, allowed []string) (map[string]*yaml.Node, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, l.errf(path, field, "line %d: expected a mapping", n.Line)
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, l.errf(path, field, "line %d: a key must be a string", k.Line)
		}
		name := k.Value
		f := name
		if field != "" {
			f = field + "." + name
		}
		if why, ok := unsupported[name]; ok {
			return nil, l.errf(path, f, "line %d: %s", k.Line, why)
		}
		if !slices.Contains(allowed, name) {
			return nil, l.errf(path, f, "line %d: unknown field", k.Line)
		}
		if _, dup := out[name]; dup {
			return nil, l.errf(path, f, "line %d: field given twice", k.Line)
		}
		out[name] = v
	}
	return out, nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func (l *loader) str(n *yaml.Node, path, field string) (string, error) {
	if n == nil || isNull(n) {
		return "", nil
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return "", l.errf(path, field, "line %d: expected a string", n.Line)
	}
	return n.Value, nil
}

func (l *loader) boolean(n *yaml.Node, path, field string) (bool, error) {
	if n == nil || isNull(n) {
		return false, nil
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, l.errf(path, field, "line %d: expected true or false, not %q", n.Line, n.Value)
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		return false, l.errf(path, field, "line %d: %v", n.Line, err)
	}
	return v, nil
}

func (l *loader) count(n *yaml.Node, path, field string) (uint32, error) {
	if n == nil || isNull(n) {
		return 0, nil
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, l.errf(path, field, "line %d: expected a whole number, not %q", n.Line, n.Value)
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil {
		return 0, l.errf(path, field, "line %d: %q is not a whole number", n.Line, n.Value)
	}
	if v < 0 {
		return 0, l.errf(path, field, "line %d: %d is negative", n.Line, v)
	}
	if v > math.MaxUint32 {
		return 0, l.errf(path, field, "line %d: %d exceeds %d", n.Line, v, uint32(math.MaxUint32))
	}
	return uint32(v), nil
}

func (l *loader) list(n *yaml.Node, path, field string) ([]*yaml.Node, error) {
	if n == nil || isNull(n) {
		return nil, nil
	}
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		return nil, l.errf(path, field, "line %d: expected a list", n.Line)
	}
	return n.Content, nil
}

// descriptors loads a list of descriptors into parent; parentPath is the
// parent's rule path ("domain" or "domain.key_value").
func (l *loader) descriptors(d *Domain, parent *node, n *yaml.Node, parentPath, field string) error {
	items, err := l.list(n, parentPath, field)
	if err != nil {
		return err
	}
	for idx, item := range items {
		at := fmt.Sprintf("%s[%d]", field, idx)
		fields, err := l.mapping(item, parentPath, at, descriptorFields)
		if err != nil {
			return err
		}
		key, err := l.str(fields["key"], parentPath, at+".key")
		if err != nil {
			return err
		}
		if key == "" {
			return l.errf(parentPath, at+".key", "a descriptor needs a non-empty key")
		}
		value, err := l.str(fields["value"], parentPath, at+".value")
		if err != nil {
			return err
		}
		final := key
		if value != "" {
			final += "_" + value
		}
		path := parentPath + "." + final
		if _, dup := parent.children[final]; dup {
			return l.errf(path, "key", "duplicate descriptor (key %q, value %q) at this level", key, value)
		}
		c := &node{children: map[string]*node{}}
		shadow, err := l.boolean(fields["shadow_mode"], path, "shadow_mode")
		if err != nil {
			return err
		}
		detailed, err := l.boolean(fields["detailed_metric"], path, "detailed_metric")
		if err != nil {
			return err
		}
		if c.valueToMetric, err = l.boolean(fields["value_to_metric"], path, "value_to_metric"); err != nil {
			return err
		}
		if c.shareThreshold, err = l.boolean(fields["share_threshold"], path, "share_threshold"); err != nil {
			return err
		}
		wildcard := strings.HasSuffix(final, "*")
		if c.shareThreshold && !wildcard {
			return l.errf(path, "share_threshold", "share_threshold needs a wildcard value (ending in '*')")
		}
		if rl := fields["rate_limit"]; rl != nil && !isNull(rl) {
			lim, err := l.rateLimit(rl, path)
			if err != nil {
				return err
			}
			lim.Path, lim.Domain, lim.ShadowMode, lim.DetailedMetric = path, d.Name, shadow, detailed
			c.limit = lim
			d.Rules = append(d.Rules, lim)
		}
		if err := l.descriptors(d, c, fields["descriptors"], path, "descriptors"); err != nil {
			return err
		}
		if wildcard {
			parent.wildcards = append(parent.wildcards, final)
		}
		parent.children[final] = c
	}
	return nil
}

func (l *loader) rateLimit(n *yaml.Node, path string) (*Limit, error) {
	fields, err := l.mapping(n, path, "rate_limit", rateLimitFields)
	if err != nil {
		return nil, err
	}
	lim := &Limit{}
	if lim.Unlimited, err = l.boolean(fields["unlimited"], path, "rate_limit.unlimited"); err != nil {
		return nil, err
	}
	unit, err := l.str(fields["unit"], path, "rate_limit.unit")
	if err != nil {
		return nil, err
	}
	u, ok := ParseUnit(unit)
	switch {
	case lim.Unlimited && ok:
		return nil, l.errf(path, "rate_limit.unit", "an unlimited rule takes no unit")
	case !lim.Unlimited && !ok:
		return nil, l.errf(path, "rate_limit.unit", "invalid unit %q: must be second, minute, hour, day, week, month or year", unit)
	}
	lim.Unit = u
	if lim.RequestsPerUnit, err = l.count(fields["requests_per_unit"], path, "rate_limit.requests_per_unit"); err != nil {
		return nil, err
	}
	if lim.Name, err = l.str(fields["name"], path, "rate_limit.name"); err != nil {
		return nil, err
	}
	algo, err := l.str(fields["algorithm"], path, "rate_limit.algorithm")
	if err != nil {
		return nil, err
	}
	if algo != "" {
		a, ok := ParseAlgorithm(algo)
		if !ok {
			return nil, l.errf(path, "rate_limit.algorithm", "invalid algorithm %q: must be fixed, sliding, token, leaky or log", algo)
		}
		lim.Algorithm = a
	}
	reps, err := l.list(fields["replaces"], path, "rate_limit.replaces")
	if err != nil {
		return nil, err
	}
	for i, r := range reps {
		at := fmt.Sprintf("rate_limit.replaces[%d]", i)
		rf, err := l.mapping(r, path, at, replacesFields)
		if err != nil {
			return nil, err
		}
		name, err := l.str(rf["name"], path, at+".name")
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, l.errf(path, at+".name", "a replaces entry needs a name")
		}
		if name == lim.Name {
			return nil, l.errf(path, at+".name", "a rule cannot replace itself (%q)", name)
		}
		lim.Replaces = append(lim.Replaces, name)
	}
	return lim, nil
}
