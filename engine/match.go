package engine

// MatchGlob reports whether s matches the Redis glob pattern (as KEYS and
// SCAN MATCH use it: * ? [abc] [^a] [a-z] and \ escapes). Its work is bounded
// by len(pattern)*len(s): no pattern can make it explode.
func MatchGlob(pattern, s []byte) bool { return globMatch(pattern, s) }
