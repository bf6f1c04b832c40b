package engine

// RL.ACQUIRE and RL.RELEASE: a KindConcurrency key holds leases, each a
// client-chosen token, a number of units and an expiry. At most the rule's
// limit of units is held at once by live leases; a lease whose expiry is at
// or before the op's time is gone. Nothing happens on a timer: every op on
// the key first drops the expired leases at its own time, so replicas that
// apply the same ops at the same times hold the same leases.
//
// A key's leases live in a per-stripe side slab (like RL.LOG's rings) indexed
// by the entry's a word. Each set is a treap ordered by (expiry, token),
// whose nodes carry the units of their subtree, plus a map from token to
// node. So every decision is O(log n) in the live leases: dropping the
// expired ones is one split (plus O(1) per lease dropped, each paid once),
// a renewal or a release is a delete and an insert, the last expiry is the
// rightmost node, and a denial's retry time (the first expiry at which
// enough units have gone for the request to fit) is one descent summing
// units. The treap's shape depends on its priorities, which are local and
// invisible: the state is the set of leases, exported in (expiry, token)
// order.

// lease is one node of a leaseSet's treap.
type lease struct {
	token       string
	units       int64
	expiry      int64
	sum         int64 // units of the subtree rooted here
	prio        uint64
	left, right int32 // node ids, nilLease for none
}

const nilLease = int32(-1)

// leaseSet is one key's leases.
type leaseSet struct {
	nodes   []lease
	free    []int32
	root    int32
	byToken map[string]int32
	n       int
	rng     uint64
}

// leaseSlab holds a stripe's lease sets; free lists released set ids; count
// and tokenBytes sum the leases held and their tokens' bytes (for the
// accounting, memory.go).
type leaseSlab struct {
	sets       []leaseSet
	free       []uint32
	count      int64
	tokenBytes int64
}

func (l *leaseSlab) alloc() uint32 {
	id := slot(&l.sets, &l.free)
	l.sets[id] = leaseSet{root: nilLease, byToken: map[string]int32{}, rng: 0x9e3779b97f4a7c15}
	return id
}

func (l *leaseSlab) release(id uint32) {
	ls := &l.sets[id]
	l.count -= int64(ls.n)
	for tok := range ls.byToken {
		l.tokenBytes -= int64(len(tok))
	}
	l.sets[id] = leaseSet{}
	l.free = append(l.free, id)
}

// held is the units of the live leases.
func (ls *leaseSet) held() int64 { return ls.sumOf(ls.root) }

func (ls *leaseSet) sumOf(t int32) int64 {
	if t == nilLease {
		return 0
	}
	return ls.nodes[t].sum
}

func (ls *leaseSet) upd(t int32) {
	nd := &ls.nodes[t]
	nd.sum = nd.units + ls.sumOf(nd.left) + ls.sumOf(nd.right)
}

// before orders nodes by (expiry, token).
func (ls *leaseSet) before(a, b int32) bool {
	x, y := &ls.nodes[a], &ls.nodes[b]
	return x.expiry < y.expiry || x.expiry == y.expiry && x.token < y.token
}

func (ls *leaseSet) merge(a, b int32) int32 {
	if a == nilLease {
		return b
	}
	if b == nilLease {
		return a
	}
	if ls.nodes[a].prio > ls.nodes[b].prio {
		ls.nodes[a].right = ls.merge(ls.nodes[a].right, b)
		ls.upd(a)
		return a
	}
	ls.nodes[b].left = ls.merge(a, ls.nodes[b].left)
	ls.upd(b)
	return b
}

// splitExp splits t into the nodes with expiry <= cut and the others.
func (ls *leaseSet) splitExp(t int32, cut int64) (int32, int32) {
	return ls.split(t, func(n int32) bool { return ls.nodes[n].expiry <= cut })
}

// splitNode splits t into the nodes ordered before node x and the others.
func (ls *leaseSet) splitNode(t, x int32) (int32, int32) {
	return ls.split(t, func(n int32) bool { return ls.before(n, x) })
}

// split splits t into the nodes for which left holds and the others; left
// must hold on a prefix of the order.
func (ls *leaseSet) split(t int32, left func(n int32) bool) (int32, int32) {
	if t == nilLease {
		return nilLease, nilLease
	}
	if left(t) {
		l, r := ls.split(ls.nodes[t].right, left)
		ls.nodes[t].right = l
		ls.upd(t)
		return t, r
	}
	l, r := ls.split(ls.nodes[t].left, left)
	ls.nodes[t].left = r
	ls.upd(t)
	return l, t
}

// link inserts the detached node x into the tree.
func (ls *leaseSet) link(x int32) {
	nd := &ls.nodes[x]
	nd.left, nd.right, nd.sum = nilLease, nilLease, nd.units
	l, r := ls.splitNode(ls.root, x)
	ls.root = ls.merge(ls.merge(l, x), r)
}

// unlink detaches node x from the tree.
func (ls *leaseSet) unlink(x int32) {
	ls.root = ls.erase(ls.root, x)
}

func (ls *leaseSet) erase(t, x int32) int32 {
	if t == x {
		return ls.merge(ls.nodes[t].left, ls.nodes[t].right)
	}
	if t == nilLease {
		return nilLease
	}
	if ls.before(x, t) {
		ls.nodes[t].left = ls.erase(ls.nodes[t].left, x)
	} else {
		ls.nodes[t].right = ls.erase(ls.nodes[t].right, x)
	}
	ls.upd(t)
	return t
}

// add stores a new lease and returns its node.
func (ls *leaseSet) add(token []byte, units, expiry int64) int32 {
	ls.rng ^= ls.rng << 13
	ls.rng ^= ls.rng >> 7
	ls.rng ^= ls.rng << 17
	nd := lease{token: string(token), units: units, expiry: expiry, prio: ls.rng}
	var x int32
	if n := len(ls.free); n > 0 {
		x = ls.free[n-1]
		ls.free = ls.free[:n-1]
		ls.nodes[x] = nd
	} else {
		x = int32(len(ls.nodes))
		ls.nodes = append(ls.nodes, nd)
	}
	ls.byToken[nd.token] = x
	ls.n++
	ls.link(x)
	return x
}

// drop frees the detached node x.
func (ls *leaseSet) drop(x int32) {
	delete(ls.byToken, ls.nodes[x].token)
	ls.nodes[x] = lease{}
	ls.free = append(ls.free, x)
	ls.n--
}

// freeTree frees every node of the detached tree t and returns how many
// leases and token bytes went.
func (ls *leaseSet) freeTree(t int32) (n, b int64) {
	if t == nilLease {
		return 0, 0
	}
	l, r := ls.nodes[t].left, ls.nodes[t].right
	b = int64(len(ls.nodes[t].token))
	ls.drop(t)
	n1, b1 := ls.freeTree(l)
	n2, b2 := ls.freeTree(r)
	return 1 + n1 + n2, b + b1 + b2
}

// lastExpiry is the latest expiry held (the set is not empty).
func (ls *leaseSet) lastExpiry() int64 {
	t := ls.root
	for ls.nodes[t].right != nilLease {
		t = ls.nodes[t].right
	}
	return ls.nodes[t].expiry
}

// expiryFor is the earliest expiry by which leases holding at least need
// units (0 < need <= held) have expired.
func (ls *leaseSet) expiryFor(need int64) int64 {
	t := ls.root
	for {
		nd := &ls.nodes[t]
		if l := ls.sumOf(nd.left); l >= need {
			t = nd.left
			continue
		} else {
			need -= l
		}
		if nd.units >= need || nd.right == nilLease {
			return nd.expiry
		}
		need -= nd.units
		t = nd.right
	}
}

// each calls fn on the leases in (expiry, token) order.
func (ls *leaseSet) each(t int32, fn func(*lease)) {
	if t == nilLease {
		return
	}
	ls.each(ls.nodes[t].left, fn)
	fn(&ls.nodes[t])
	ls.each(ls.nodes[t].right, fn)
}

// compact rebuilds a mostly free node array, so memory follows the live
// leases.
func (ls *leaseSet) compact() {
	if len(ls.nodes) <= 16 || ls.n >= len(ls.nodes)/4 {
		return
	}
	old := make([]lease, 0, ls.n)
	ls.each(ls.root, func(l *lease) { old = append(old, *l) })
	*ls = leaseSet{root: nilLease, byToken: make(map[string]int32, len(old)), rng: ls.rng, nodes: make([]lease, 0, 2*len(old))}
	for i := range old {
		ls.add([]byte(old[i].token), old[i].units, old[i].expiry)
	}
}

// leasePrune drops the leases of ls whose expiry is at or before now,
// keeping the accounting.
func (s *stripe) leasePrune(ls *leaseSet, now int64) {
	if ls.root == nilLease {
		return
	}
	first := ls.root
	for ls.nodes[first].left != nilLease {
		first = ls.nodes[first].left
	}
	if ls.nodes[first].expiry > now {
		return
	}
	gone, rest := ls.splitExp(ls.root, now)
	ls.root = rest
	if n, b := ls.freeTree(gone); n > 0 {
		s.leases.count -= n
		s.leases.tokenBytes -= b
		ls.compact()
		s.account()
	}
}

// leaseResult fills a concurrency reply for held units after the call.
func leaseResult(ls *leaseSet, limit, held, now int64) Result {
	res := Result{Kind: KindConcurrency, Allowed: true, Limit: limit, Remaining: max(0, limit-held)}
	if ls != nil && ls.n > 0 {
		res.ResetAfter = ceilMs(ls.lastExpiry() - now)
	}
	return res
}

// acquire runs an OpAcquire (token set) or a peek (n == 0, token possibly
// nil) on the locked stripe, and reports whether the key has state after it.
// rule is valid and of KindConcurrency.
func (s *stripe) acquire(now int64, hi uint32, key []byte, rule Rule, n int64, token []byte) (Result, bool) {
	pos, idx, found := s.find(hi, key)
	var e *entry
	var ls *leaseSet
	if found {
		e = s.entry(idx)
		if s.rules.get(e.rule).Kind != KindConcurrency {
			if _, _, _, live := s.liveState(e, now); live {
				return Result{Err: ErrWrongType}, true
			}
			found = false
		} else {
			ls = &s.leases.sets[e.a]
			s.leasePrune(ls, now)
			found = ls.n > 0
		}
		if !found {
			s.remove(pos, idx)
			pos, _, _ = s.find(hi, key)
			e, ls = nil, nil
		}
	}
	held := int64(0)
	if found {
		held = ls.held()
	}
	if n == 0 { // a peek: the rule judged with n = 0, nothing stored
		res := leaseResult(ls, rule.Limit, held, now)
		if held > rule.Limit {
			res.Allowed = false
			res.RetryAfter = max(1, ceilMs(ls.expiryFor(held-rule.Limit)-now))
		}
		return res, found
	}
	if found {
		if x, ok := ls.byToken[string(token)]; ok { // a renewal
			ls.unlink(x)
			ls.nodes[x].expiry = satAdd(now, rule.Period)
			ls.link(x)
			s.setRule(e, rule)
			return leaseResult(ls, rule.Limit, held, now), true
		}
	}
	if held+n <= rule.Limit {
		if !found {
			if err := s.room(key, KindConcurrency); err != nil {
				return Result{Err: err}, false
			}
			id := s.leases.alloc()
			e = s.entry(s.insert(pos, hi, key, rule, state{a: int64(id)}))
			ls = &s.leases.sets[id]
		} else {
			s.setRule(e, rule)
		}
		ls.add(token, n, satAdd(now, rule.Period))
		s.leases.count++
		s.leases.tokenBytes += int64(len(token))
		s.account()
		return leaseResult(ls, rule.Limit, held+n, now), true
	}
	res := leaseResult(ls, rule.Limit, held, now)
	res.Allowed = false
	if n > rule.Limit {
		res.RetryAfter = -1
	} else {
		res.RetryAfter = max(1, ceilMs(ls.expiryFor(held+n-rule.Limit)-now))
	}
	if found {
		s.setRule(e, rule)
	}
	return res, found
}

var (
	errBadToken       = badRule("a lease token must be 1 to %d bytes", MaxToken)
	errNotConcurrency = badRule("a lease needs a concurrency rule")
	errNeedsToken     = badRule("a concurrency limit is decided by RL.ACQUIRE")
)

// checkToken validates a lease token.
func checkToken(token []byte) error {
	if len(token) < 1 || len(token) > MaxToken {
		return errBadToken
	}
	return nil
}

// acquireOp is OpAcquire at now.
func (e *Engine) acquireOp(now int64, op *Op) Result {
	if op.Rule.Kind != KindConcurrency {
		return Result{Err: errNotConcurrency}
	}
	if err := e.checkRule(op.Rule, op.Cost); err != nil {
		return Result{Err: err}
	}
	if op.Cost > 0 || op.Token != nil {
		if err := checkToken(op.Token); err != nil {
			return Result{Err: err}
		}
	}
	hi, s := e.lock(op.Key)
	res, _ := s.acquire(now, hi, op.Key, op.Rule, op.Cost, op.Token)
	e.unlk(s)
	if res.Err == errNoRoom {
		e.reclaimAll(now)
		e.lk(s)
		s.final = true
		res, _ = s.acquire(now, hi, op.Key, op.Rule, op.Cost, op.Token)
		s.final = false
		e.unlk(s)
	}
	return res
}

// release is OpRelease at now: Count 1 if a live lease went, else 0.
func (e *Engine) release(now int64, key, token []byte) Result {
	if err := checkToken(token); err != nil {
		return Result{Err: err}
	}
	hi, s := e.lock(key)
	defer e.unlk(s)
	pos, idx, found := s.find(hi, key)
	if !found {
		return Result{}
	}
	ent := s.entry(idx)
	if s.rules.get(ent.rule).Kind != KindConcurrency {
		if _, _, _, live := s.liveState(ent, now); live {
			return Result{Err: ErrWrongType}
		}
		return Result{}
	}
	ls := &s.leases.sets[ent.a]
	s.leasePrune(ls, now)
	var res Result
	if x, ok := ls.byToken[string(token)]; ok {
		s.leases.count--
		s.leases.tokenBytes -= int64(len(ls.nodes[x].token))
		ls.unlink(x)
		ls.drop(x)
		ls.compact()
		res.Count = 1
		s.account()
	}
	if ls.n == 0 {
		s.remove(pos, idx)
	}
	return res
}

// leaseTTL is the nanoseconds until the last lease of a live key expires.
func (s *stripe) leaseTTL(e *entry, now int64) int64 {
	ls := &s.leases.sets[e.a]
	if ls.n == 0 {
		return 0
	}
	return max(0, ls.lastExpiry()-now)
}

// leaseLive reports whether entry e's lease set has a lease live at now.
func (s *stripe) leaseLive(e *entry, now int64) bool {
	ls := &s.leases.sets[e.a]
	return ls.n > 0 && ls.lastExpiry() > now
}
