package distrib

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ReduceOp is the reduction of AllReduce and ReduceScatter.
type ReduceOp int

const (
	// Sum adds the ranks' tensors.
	Sum ReduceOp = iota
	// Mean adds them and divides by the world size (once, after the sum).
	Mean
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	}
	return fmt.Sprintf("ReduceOp(%d)", int(o))
}

func (o ReduceOp) check() string {
	if o != Sum && o != Mean {
		return fmt.Sprintf("unknown reduce op %d", int(o))
	}
	return ""
}

// Option modifies a collective.
type Option func(*options)

type options struct{ bf16 bool }

// WithBF16 sends float32 tensors as bfloat16 on the wire (half the bytes)
// and accumulates in float32: each partial sum is rounded to bfloat16 before
// it travels, and the results of AllReduce are bfloat16 values (the same bits
// on every rank). In a world of one it changes nothing.
func WithBF16() Option { return func(o *options) { o.bf16 = true } }

func makeOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

type stepKey struct{}

// WithStep returns a context whose collectives name the training step in
// their errors ("AllReduce (step 17, collective 312)").
func WithStep(ctx context.Context, step int64) context.Context {
	return context.WithValue(ctx, stepKey{}, step)
}

func stepFrom(ctx context.Context) int64 {
	if s, ok := ctx.Value(stepKey{}).(int64); ok {
		return s
	}
	return -1
}

// localFailure is what went wrong in this rank's part of a collective.
type localFailure struct {
	suspect int // the rank it points at
	kind    int
	detail  string
	err     error      // local cause (the context's error)
	verdict *RankError // set when the group's verdict interrupted the call
}

// call is one collective in progress.
type call struct {
	g       *Group
	op      string
	seq     uint64
	step    int64
	abortCh chan struct{}
	once    sync.Once
	cause   *localFailure // read only after abortCh is closed
}

var longAgo = time.Unix(1, 0)

// fail records the first failure and interrupts the call's I/O.
func (c *call) fail(f *localFailure) {
	c.once.Do(func() {
		c.cause = f
		close(c.abortCh)
		if c.g.next != nil {
			_ = c.g.next.SetDeadline(longAgo)
		}
		if c.g.prev != nil {
			_ = c.g.prev.SetDeadline(longAgo)
		}
	})
}

func (c *call) failed() bool {
	select {
	case <-c.abortCh:
		return true
	default:
		return false
	}
}

func (c *call) header(code uint16, n int, root int, bf16 bool) header {
	h := header{op: code, seq: c.seq, n: uint64(n)}
	if root >= 0 {
		h.root = uint32(root)
	}
	if bf16 {
		h.flags |= flagBF16
	}
	return h
}

// spec describes a collective for the checks made before it runs.
type spec struct {
	code    uint16
	n       int // elements; -1 for objects and barriers
	root    int // -1 without a root
	bf16    bool
	invalid string // why this rank's arguments cannot work, or ""
}

// setVerdict records the group's verdict (the first one wins) and
// interrupts the collective in progress. It reports whether v won.
func (g *Group) setVerdict(v *RankError) bool {
	won := false
	g.verdictOnce.Do(func() {
		g.verdict.Store(v)
		close(g.verdictCh)
		won = true
	})
	if won {
		g.log.WithField("culprit", v.Rank).Debug("distrib: " + v.Msg)
		if c := g.cur.Load(); c != nil {
			c.fail(&localFailure{verdict: v})
		}
	}
	return won
}

func (g *Group) probeState(id uint64) probeReplyMsg {
	return probeReplyMsg{ID: id, Started: g.started.Load(), Finished: g.finished.Load(), Op: *g.curOp.Load()}
}

// lostVerdict is the verdict when rank's connection to rank 0 closed.
func (g *Group) lostVerdict(rank int, detail string) *RankError {
	started, finished := g.started.Load(), g.finished.Load()
	op := *g.curOp.Load()
	step := g.curStep.Load()
	v := &RankError{Rank: rank, Kind: ErrPeerLost, Op: op, Seq: started, Step: step}
	switch {
	case started > finished:
		v.Msg = fmt.Sprintf("rank %d was lost during %s: %s", rank, opDesc(op, step, started), detail)
	case started == 0:
		v.Op, v.Step = "", -1
		v.Msg = fmt.Sprintf("rank %d was lost before the first collective: %s", rank, detail)
	default:
		v.Msg = fmt.Sprintf("rank %d was lost after %s: %s", rank, opDesc(op, step, started), detail)
	}
	return v
}

// collective runs body as collective number g.seq+1 with the checks,
// deadline, cancellation and failure handling every collective shares.
//
// On a group whose collectives run on another transport (MPI), alt runs
// instead of body once the group has more than one rank; see viaTransport.
func (g *Group) collective(ctx context.Context, s spec, body func(c *call), alt func(t transport) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	name := opNames[s.code]
	if g.closed.Load() {
		return &RankError{Rank: g.rank, Op: name, Seq: g.seq + 1, Step: stepFrom(ctx), Kind: ErrClosed,
			Msg: fmt.Sprintf("%s on rank %d: the process group is closed", name, g.rank)}
	}
	if v := g.verdict.Load(); v != nil {
		if g.ctl != nil {
			g.ctl.waitAbortSent()
		}
		return v
	}
	g.seq++
	c := &call{g: g, op: name, seq: g.seq, step: stepFrom(ctx), abortCh: make(chan struct{})}
	g.curOp.Store(&name)
	g.curStep.Store(c.step)
	g.started.Store(c.seq)
	desc := opDesc(c.op, c.step, c.seq)

	if g.size == 1 {
		if err := ctx.Err(); err != nil {
			return &RankError{Rank: 0, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrAborted, Err: err,
				Msg: fmt.Sprintf("rank 0 gave up %s: %v", desc, err)}
		}
		if s.invalid != "" {
			return &RankError{Rank: 0, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrInvalid,
				Msg: fmt.Sprintf("rank 0: %s: %s", desc, s.invalid)}
		}
		body(c)
		g.finished.Store(c.seq)
		return nil
	}
	if g.tr != nil {
		return g.viaTransport(ctx, c, s, alt)
	}

	deadline := time.Now().Add(g.timeout)
	_ = g.next.SetWriteDeadline(deadline)
	_ = g.prev.SetReadDeadline(deadline)
	g.cur.Store(c)
	defer g.cur.Store(nil)
	if v := g.verdict.Load(); v != nil {
		c.fail(&localFailure{verdict: v})
	}
	cancelled := func() *localFailure {
		return &localFailure{suspect: g.rank, kind: kindAborted, detail: ctx.Err().Error(), err: ctx.Err()}
	}
	stop := context.AfterFunc(ctx, func() { c.fail(cancelled()) })
	defer stop()
	if ctx.Err() != nil {
		c.fail(cancelled())
	}
	if g.cfg.Debug {
		if !c.failed() {
			if err := g.debugCheck(c, s); err != nil && !c.failed() {
				g.finished.Store(c.seq)
				return err
			}
		}
	} else if s.invalid != "" {
		c.fail(&localFailure{suspect: g.rank, kind: kindInvalid, detail: s.invalid})
	}
	if !c.failed() {
		body(c)
	}
	if !c.failed() {
		g.finished.Store(c.seq)
		return nil
	}
	err := g.finishFailure(c)
	g.ctl.waitAbortSent()
	return err
}

// finishFailure turns a local failure into the group's verdict: rank 0
// judges it, the others report it to rank 0 and wait for the verdict.
func (g *Group) finishFailure(c *call) error {
	f := c.cause
	if f.verdict != nil {
		return f.verdict
	}
	rep := reportMsg{Op: c.op, Seq: c.seq, Step: c.step, Suspect: f.suspect, Kind: f.kind, Detail: f.detail}
	g.log.WithField("suspect", f.suspect).Debug("distrib: " + opDesc(c.op, c.step, c.seq) + " failed here: " + f.detail)
	g.ctl.report(g.rank, rep)
	if g.ctl.master != nil {
		t := time.NewTimer(g.ctl.grace)
		select {
		case <-g.verdictCh:
		case <-t.C:
		}
		t.Stop()
	}
	v := g.verdict.Load()
	if v == nil {
		g.setVerdict(g.localVerdict(rep))
		v = g.verdict.Load()
	}
	if f.err != nil && v.Rank == g.rank {
		own := *v
		own.Err = f.err
		return &own
	}
	return v
}

// localVerdict is the verdict a rank reaches alone, when rank 0 did not
// answer its report in time.
func (g *Group) localVerdict(rep reportMsg) *RankError {
	desc := opDesc(rep.Op, rep.Step, rep.Seq)
	v := &RankError{Rank: rep.Suspect, Op: rep.Op, Seq: rep.Seq, Step: rep.Step, Kind: kindError(rep.Kind)}
	switch rep.Kind {
	case kindTimeout:
		if g.ctl.masterLeft.Load() {
			v.Msg = fmt.Sprintf("rank %d did not answer within %s during %s (%s)", rep.Suspect, g.timeout, desc, rep.Detail)
		} else {
			// Rank 0's control goroutines answer even while its training
			// loop is busy; silence means the process is stuck or cut off.
			v.Rank = 0
			v.Msg = fmt.Sprintf("rank 0 did not answer within %s during %s (nor the failure report of rank %d, which waited on rank %d: %s)",
				g.timeout, desc, g.rank, rep.Suspect, rep.Detail)
		}
	case kindPeerLost:
		v.Msg = fmt.Sprintf("rank %d was lost during %s: %s (seen by rank %d)", rep.Suspect, desc, rep.Detail, g.rank)
	case kindMismatch:
		v.Msg = fmt.Sprintf("%s: collectives differ across ranks: %s", desc, rep.Detail)
	case kindAborted:
		v.Msg = fmt.Sprintf("rank %d gave up %s: %s", rep.Suspect, desc, rep.Detail)
	case kindInvalid:
		v.Msg = fmt.Sprintf("rank %d: %s: %s", rep.Suspect, desc, rep.Detail)
	default:
		v.Msg = fmt.Sprintf("rank %d closed its process group during %s", rep.Suspect, desc)
	}
	return v
}

// debugDesc is what Debug compares across ranks before each collective.
type debugDesc struct {
	Op      string
	N       int
	Root    int
	BF16    bool
	Invalid string
}

func (d debugDesc) String() string {
	s := d.Op
	if d.N >= 0 {
		s += fmt.Sprintf(" of %d elements", d.N)
	}
	if d.Root >= 0 {
		s += fmt.Sprintf(" from root %d", d.Root)
	}
	if d.BF16 {
		s += " in bf16"
	}
	return s
}

// debugCheck exchanges every rank's description of the collective. When
// they differ, every rank returns the same error and the group stays usable.
func (g *Group) debugCheck(c *call, s spec) error {
	blocks := g.allGatherBytes(c, c.header(opDebugCheck, 0, -1, false), debugDescOf(c, s))
	if c.failed() {
		return nil
	}
	descs, r, err := decodeDescs(blocks)
	if err != nil {
		c.fail(&localFailure{suspect: r, kind: kindMismatch, detail: err.Error()})
		return nil
	}
	return g.compareDescs(c, descs)
}

// debugDescOf is this rank's description of the collective, encoded.
func debugDescOf(c *call, s spec) []byte {
	b, _ := json.Marshal(debugDesc{Op: c.op, N: s.n, Root: s.root, BF16: s.bf16, Invalid: s.invalid})
	return b
}

// decodeDescs decodes every rank's description; on error it also returns
// the rank whose description is malformed.
func decodeDescs(blocks [][]byte) ([]debugDesc, int, error) {
	descs := make([]debugDesc, len(blocks))
	for r, blk := range blocks {
		if err := json.Unmarshal(blk, &descs[r]); err != nil {
			return nil, r, fmt.Errorf("rank %d sent a malformed description: %v", r, err)
		}
	}
	return descs, -1, nil
}

// compareDescs returns the error every rank returns when the ranks'
// descriptions of the collective differ (or one rank's arguments are
// invalid), and nil when they agree.
func (g *Group) compareDescs(c *call, descs []debugDesc) error {
	desc := opDesc(c.op, c.step, c.seq)
	for r, d := range descs {
		if d.Invalid != "" {
			return &RankError{Rank: r, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrInvalid,
				Msg: fmt.Sprintf("rank %d: %s: %s", r, desc, d.Invalid)}
		}
	}
	// The most common description is the reference (rank 0's on a tie).
	count := map[debugDesc]int{}
	for _, d := range descs {
		count[d]++
	}
	ref := descs[0]
	for _, d := range descs {
		if count[d] > count[ref] {
			ref = d
		}
	}
	if count[ref] == g.size {
		return nil
	}
	culprit := -1
	sameOp := true
	for r, d := range descs {
		if d != ref && culprit < 0 {
			culprit = r
		}
		if d.Op != ref.Op || d.Root != ref.Root || d.BF16 != ref.BF16 {
			sameOp = false
		}
	}
	parts := make([]string, g.size)
	what := "ranks called different collectives"
	for r, d := range descs {
		if sameOp {
			parts[r] = fmt.Sprintf("rank %d: %d", r, d.N)
		} else {
			parts[r] = fmt.Sprintf("rank %d: %s", r, d)
		}
	}
	if sameOp {
		what = "tensor lengths differ across ranks"
	}
	return &RankError{Rank: culprit, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrMismatch,
		Msg: fmt.Sprintf("%s: %s: %s", desc, what, strings.Join(parts, ", "))}
}

// AllReduce replaces data, on every rank, with the element-wise sum (or
// mean) of every rank's data. It uses the bandwidth-optimal ring algorithm
// (a reduce-scatter then an all-gather, each rank sending 2(n-1)/n of the
// bytes), pipelined in chunks; every element is summed once, in ring order,
// so every rank ends with the same bits, run after run.
func (g *Group) AllReduce(ctx context.Context, data []float32, op ReduceOp, opts ...Option) error {
	o := makeOptions(opts)
	s := spec{code: opAllReduce, n: len(data), root: -1, bf16: o.bf16, invalid: op.check()}
	return g.collective(ctx, s, func(c *call) {
		if g.size > 1 {
			g.runFloat(c, g.allReducePlan(c, data, op, o.bf16))
		}
	}, func(t transport) error { return t.allReduce(data, op) })
}

// ReduceScatter reduces input (WorldSize blocks of len(output) elements)
// across ranks and writes block Rank() of the result to output. input is
// not modified (a workspace of len(input) elements is kept by the group).
func (g *Group) ReduceScatter(ctx context.Context, input, output []float32, op ReduceOp, opts ...Option) error {
	o := makeOptions(opts)
	s := spec{code: opReduceScatter, n: len(input), root: -1, bf16: o.bf16, invalid: op.check()}
	if s.invalid == "" && len(input) != g.size*len(output) {
		s.invalid = fmt.Sprintf("input has %d elements, want world size %d × output's %d = %d", len(input), g.size, len(output), g.size*len(output))
	}
	return g.collective(ctx, s, func(c *call) {
		if g.size == 1 {
			copy(output, input)
			return
		}
		if cap(g.work) < len(input) {
			g.work = make([]float32, len(input))
		}
		work := g.work[:len(input)]
		copy(work, input)
		g.runFloat(c, g.reduceScatterPlan(c, work, op, o.bf16))
		if !c.failed() {
			m := len(output)
			copy(output, work[g.rank*m:(g.rank+1)*m])
		}
	}, func(t transport) error { return t.reduceScatter(input, output, op) })
}

// ReduceScatterInPlace is ReduceScatter without the workspace: data holds
// WorldSize blocks, and the returned slice, block Rank() of data, holds the
// reduced block. The other blocks of data are left with partial sums.
func (g *Group) ReduceScatterInPlace(ctx context.Context, data []float32, op ReduceOp, opts ...Option) ([]float32, error) {
	o := makeOptions(opts)
	s := spec{code: opReduceScatter, n: len(data), root: -1, bf16: o.bf16, invalid: op.check()}
	if s.invalid == "" && len(data)%g.size != 0 {
		s.invalid = fmt.Sprintf("%d elements do not split into %d equal blocks", len(data), g.size)
	}
	m := len(data) / g.size
	err := g.collective(ctx, s, func(c *call) {
		if g.size > 1 {
			g.runFloat(c, g.reduceScatterPlan(c, data, op, o.bf16))
		}
	}, func(t transport) error {
		block := data[g.rank*m : (g.rank+1)*m]
		if cap(g.work) < m {
			g.work = make([]float32, m)
		}
		out := g.work[:m]
		if err := t.reduceScatter(data, out, op); err != nil {
			return err
		}
		copy(block, out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return data[g.rank*m : (g.rank+1)*m], nil
}

// AllGather concatenates every rank's input, in rank order, into output
// (WorldSize × len(input) elements) on every rank.
func (g *Group) AllGather(ctx context.Context, input, output []float32) error {
	s := spec{code: opAllGather, n: len(input), root: -1}
	if len(output) != g.size*len(input) {
		s.invalid = fmt.Sprintf("output has %d elements, want world size %d × input's %d = %d", len(output), g.size, len(input), g.size*len(input))
	}
	return g.collective(ctx, s, func(c *call) {
		m := len(input)
		copy(output[g.rank*m:(g.rank+1)*m], input)
		if g.size > 1 {
			g.runFloat(c, g.allGatherPlan(c, output, m))
		}
	}, func(t transport) error { return t.allGather(input, output) })
}

// Broadcast copies root's data into data on every rank (a pipelined chain
// root → root+1 → ...).
func (g *Group) Broadcast(ctx context.Context, data []float32, root int) error {
	s := spec{code: opBroadcast, n: len(data), root: root}
	if root < 0 || root >= g.size {
		s.invalid = fmt.Sprintf("root %d is outside 0..%d", root, g.size-1)
		s.root = -1
	}
	return g.collective(ctx, s, func(c *call) {
		if g.size > 1 {
			g.runFloat(c, g.broadcastPlan(c, data, root))
		}
	}, func(t transport) error { return t.broadcast(data, root) })
}

// Barrier returns once every rank has entered it.
func (g *Group) Barrier(ctx context.Context) error {
	s := spec{code: opBarrier, n: -1, root: -1}
	return g.collective(ctx, s, func(c *call) {
		if g.size > 1 {
			g.barrierB[0] = 0
			p := g.allReducePlan(c, g.barrierB[:], Sum, false)
			p.hdr.op = opBarrier
			g.runFloat(c, p)
		}
	}, func(t transport) error { return t.barrier() })
}

// AllGatherObject gathers every rank's bytes (of any length, possibly
// different on each rank) on every rank, indexed by rank.
func (g *Group) AllGatherObject(ctx context.Context, obj []byte) ([][]byte, error) {
	var out [][]byte
	s := spec{code: opAllGatherObject, n: -1, root: -1}
	err := g.collective(ctx, s, func(c *call) {
		if g.size == 1 {
			out = [][]byte{append([]byte(nil), obj...)}
			return
		}
		out = g.allGatherBytes(c, c.header(opAllGatherObject, 0, -1, false), obj)
	}, func(t transport) (err error) {
		out, err = t.allGatherBytes(obj)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GatherObject gathers every rank's bytes on root, indexed by rank (a chain
// root+1 → ... → root). Other ranks get nil.
func (g *Group) GatherObject(ctx context.Context, obj []byte, root int) ([][]byte, error) {
	var out [][]byte
	s := spec{code: opGatherObject, n: -1, root: root}
	if root < 0 || root >= g.size {
		s.invalid = fmt.Sprintf("root %d is outside 0..%d", root, g.size-1)
		s.root = -1
	}
	err := g.collective(ctx, s, func(c *call) {
		if g.size == 1 {
			out = [][]byte{append([]byte(nil), obj...)}
			return
		}
		out = g.gatherBytes(c, obj, root)
	}, func(t transport) (err error) {
		out, err = t.gatherBytes(obj, root)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// BroadcastObject sends root's bytes to every rank; root gets obj back.
func (g *Group) BroadcastObject(ctx context.Context, obj []byte, root int) ([]byte, error) {
	var out []byte
	s := spec{code: opBroadcastObject, n: -1, root: root}
	if root < 0 || root >= g.size {
		s.invalid = fmt.Sprintf("root %d is outside 0..%d", root, g.size-1)
		s.root = -1
	}
	err := g.collective(ctx, s, func(c *call) {
		if g.size == 1 {
			out = obj
			return
		}
		out = g.broadcastBytes(c, obj, root)
	}, func(t transport) (err error) {
		out, err = t.broadcastBytes(obj, root)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
