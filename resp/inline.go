package resp

// splitInline splits an inline command line (without its line end) into
// arguments by the rules of Redis's sdssplitargs, appends them to argv and
// returns it; ok is false for quotes Redis refuses ("unbalanced quotes").
// It decodes in place: each argument is a sub-slice of line, whose bytes
// it overwrites (an argument is never longer than its source), so it
// allocates nothing but argv's growth. TestInlineLikeRedis holds cases
// recorded from redis-server 7.
//
// The rules: arguments are separated by blanks (space, \t, \n, \v, \f,
// \r; inside an unquoted argument only space, \t, \n and \r separate). A
// double quote anywhere in an unquoted argument opens a quoted part, in
// which \xHH (two hex digits), \n, \r, \t, \b, \a and \<any other byte>
// (that byte) are escapes; a single quote opens one in which only \' is.
// A closing quote must be followed by a blank or the end of the line. A
// NUL byte ends the line (Redis splits a C string); the parser never
// hands one over, as in Redis a NUL hides the line's end.
func splitInline(line []byte, argv [][]byte) ([][]byte, bool) {
	n := len(line)
	at := func(i int) byte { // the byte at i; 0 past the end, as in C
		if i < n {
			return line[i]
		}
		return 0
	}
	i := 0
	for {
		for i < n && isBlank(line[i]) {
			i++
		}
		if at(i) == 0 {
			return argv, true
		}
		start, w := i, i // the argument is decoded into line[start:w]
		inq, insq := false, false
		for done := false; !done; {
			c := at(i)
			switch {
			case inq:
				switch {
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					line[w] = unhex(at(i+2))<<4 | unhex(at(i+3))
					w++
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
					switch c = line[i]; c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					line[w] = c
					w++
				case c == '"':
					if at(i+1) != 0 && !isBlank(at(i+1)) {
						return argv, false
					}
					done = true
				case c == 0:
					return argv, false
				default:
					line[w] = c
					w++
				}
			case insq:
				switch {
				case c == '\\' && at(i+1) == '\'':
					i++
					line[w] = '\''
					w++
				case c == '\'':
					if at(i+1) != 0 && !isBlank(at(i+1)) {
						return argv, false
					}
					done = true
				case c == 0:
					return argv, false
				default:
					line[w] = c
					w++
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					line[w] = c
					w++
				}
			}
			if at(i) != 0 {
				i++
			}
		}
		argv = append(argv, line[start:w:w])
	}
}

// isBlank is C's isspace in the C locale.
func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// unhex is the value of the hex digit c.
func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
