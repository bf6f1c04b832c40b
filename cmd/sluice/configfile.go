package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The configuration file (--config): Redis's format, overridden by the command line.

// setting names a setting in a message: "--name", or "file:line: name"
// when its value came from the configuration file.
func (o *opsConfig) setting(name string) string {
	if where, ok := o.origin[name]; ok {
		return where + ": " + name
	}
	return "--" + name
}

// applyConfigFile reads the file named by --config in args, if any, and
// sets its settings in fs, before fs parses args (so that the command line
// overrides the file). Unknown names and bad values are errors naming the
// file and line. It records where each setting not also on the command line
// came from.
func (o *opsConfig) applyConfigFile(fs *flag.FlagSet, args []string) error {
	cli, path := commandLineNames(fs, args)
	if path == "" {
		if cli["config"] {
			return errors.New("--config: needs a file name")
		}
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	o.origin = make(map[string]string)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		where := fmt.Sprintf("%s:%d", path, line)
		words, err := splitConfigLine(sc.Text())
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(words) == 0 {
			continue
		}
		name := strings.ToLower(words[0])
		fl := fs.Lookup(name)
		if fl == nil || name == "config" {
			return fmt.Errorf("%s: unknown setting %q", where, words[0])
		}
		var value string
		switch {
		case len(words) == 2:
			value = words[1]
		case len(words) == 1 && isBoolFlag(fl):
			value = "true"
		case len(words) == 1:
			return fmt.Errorf("%s: %s needs a value", where, name)
		default:
			return fmt.Errorf("%s: %s takes one value, got %d (quote a value with spaces)", where, name, len(words)-1)
		}
		if isBoolFlag(fl) {
			switch strings.ToLower(value) {
			case "yes":
				value = "true"
			case "no":
				value = "false"
			}
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s: bad value %q for %s: %v", where, value, name, err)
		}
		if !cli[name] {
			o.origin[name] = where
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// commandLineNames returns the names of the flags set in args, as the flag
// package will parse them, and the value of --config.
func commandLineNames(fs *flag.FlagSet, args []string) (map[string]bool, string) {
	names := make(map[string]bool)
	config := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		value, hasValue := "", false
		if k := strings.IndexByte(name, '='); k >= 0 {
			name, value, hasValue = name[:k], name[k+1:], true
		}
		names[name] = true
		fl := fs.Lookup(name)
		if fl != nil && !hasValue && !isBoolFlag(fl) && i+1 < len(args) {
			i++
			value = args[i]
		}
		if name == "config" {
			config = value
		}
	}
	return names, config
}

// splitConfigLine splits one line of a Redis configuration file into words:
// blank lines and lines starting with # have none; words are separated by
// spaces or tabs; "double quotes" take the escapes \n \r \t \b \a \" \\ and
// \xHH, 'single quotes' only \'. A closing quote must end its word.
func splitConfigLine(line string) ([]string, error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return nil, nil
	}
	var words []string
	i := 0
	for i < len(line) {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i >= len(line) {
			break
		}
		var w strings.Builder
		switch q := line[i]; q {
		case '"', '\'':
			i++
			closed := false
			for i < len(line) {
				ch := line[i]
				switch {
				case ch == '\\' && q == '"' && i+1 < len(line):
					i++
					switch e := line[i]; e {
					case 'n':
						w.WriteByte('\n')
					case 'r':
						w.WriteByte('\r')
					case 't':
						w.WriteByte('\t')
					case 'b':
						w.WriteByte('\b')
					case 'a':
						w.WriteByte('\a')
					case 'x':
						if i+2 < len(line) {
							if v, err := strconv.ParseUint(line[i+1:i+3], 16, 8); err == nil {
								w.WriteByte(byte(v))
								i += 2
								break
							}
						}
						w.WriteByte('x')
					default:
						w.WriteByte(e)
					}
				case ch == '\\' && q == '\'' && i+1 < len(line) && line[i+1] == '\'':
					i++
					w.WriteByte('\'')
				case ch == q:
					closed = true
				default:
					w.WriteByte(ch)
				}
				i++
				if closed {
					break
				}
			}
			if !closed {
				return nil, errors.New("unbalanced quotes")
			}
			if i < len(line) && line[i] != ' ' && line[i] != '\t' {
				return nil, errors.New("a closing quote must be followed by a space")
			}
		default:
			for i < len(line) && line[i] != ' ' && line[i] != '\t' {
				w.WriteByte(line[i])
				i++
			}
		}
		words = append(words, w.String())
	}
	return words, nil
}
