package pipeline

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Kind is what one action of a schedule does.
type Kind uint8

// The actions of a schedule. Forward, Backward, BackwardInput and
// BackwardWeight compute; the other four move a tensor between ranks.
const (
	// Forward runs a stage's forward pass on one micro-batch.
	Forward Kind = iota
	// Backward runs a stage's whole backward pass (input and weight
	// gradients together), as GPipe and 1F1B do.
	Backward
	// BackwardInput computes only the gradient of the stage's inputs (the
	// critical path of the zero-bubble schedules).
	BackwardInput
	// BackwardWeight computes the gradient of the stage's parameters
	// from what BackwardInput kept (scheduled into the bubbles).
	BackwardWeight
	// SendAct sends a stage's output activations to the next stage's rank.
	SendAct
	// RecvAct receives a stage's input activations from the previous
	// stage's rank.
	RecvAct
	// SendGrad sends the gradient of a stage's inputs to the previous
	// stage's rank.
	SendGrad
	// RecvGrad receives the gradient of a stage's outputs from the next
	// stage's rank.
	RecvGrad
)

var kindNames = [...]string{"F", "B", "BI", "BW", "sendA", "recvA", "sendG", "recvG"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// IsCompute reports whether the action runs a stage program.
func (k Kind) IsCompute() bool { return k <= BackwardWeight }

// Action is one step of a rank's list.
type Action struct {
	Kind Kind
	// Micro is the micro-batch, 0..M-1.
	Micro int
	// Stage is the model stage (0..S-1) the action computes, or for a
	// send/receive the stage whose tensor moves: SendAct/RecvAct carry
	// the input of Stage (the output of Stage-1), SendGrad/RecvGrad the
	// gradient of Stage's input (sent by Stage to Stage-1).
	Stage int
	// Peer is the other rank of a send or receive.
	Peer int
}

func (a Action) String() string {
	if a.Kind.IsCompute() {
		return fmt.Sprintf("%s%d.s%d", a.Kind, a.Micro, a.Stage)
	}
	return fmt.Sprintf("%s%d.s%d@r%d", a.Kind, a.Micro, a.Stage, a.Peer)
}

// Schedule is a pipeline schedule written out as one action list per rank.
type Schedule struct {
	// Name is gpipe, 1f1b, interleaved, zb1p or zbv.
	Name string
	// Ranks is the number of ranks (devices or processes) of one pipeline.
	Ranks int
	// Micro is the number of micro-batches per optimizer step.
	Micro int
	// Chunks is the number of model chunks per rank (1, or V for
	// interleaved, 2 for zbv): the model has Ranks*Chunks stages.
	Chunks int
	// Actions[r] is rank r's list, run in order.
	Actions [][]Action
	// stageRank[s] is the rank holding stage s.
	stageRank []int
	// split: backward passes are input-gradient and weight-gradient
	// actions (zero-bubble schedules).
	split bool
}

// Stages is the number of model stages (Ranks × Chunks).
func (s *Schedule) Stages() int { return s.Ranks * s.Chunks }

// RankOf is the rank that runs stage st.
func (s *Schedule) RankOf(st int) int { return s.stageRank[st] }

// StagesOf lists the stages rank r holds, in model order.
func (s *Schedule) StagesOf(r int) []int {
	var out []int
	for st, rr := range s.stageRank {
		if rr == r {
			out = append(out, st)
		}
	}
	return out
}

// SplitBackward reports whether the schedule runs input and weight
// gradients as separate actions (the zero-bubble schedules).
func (s *Schedule) SplitBackward() bool { return s.split }

// ScheduleNames lists the schedules New builds.
func ScheduleNames() []string { return []string{"gpipe", "1f1b", "interleaved", "zb1p", "zbv"} }

// New builds a schedule for ranks ranks and micro micro-batches. virtual is
// the number of chunks per rank for "interleaved" (at least 2; 0 means 2)
// and is ignored by the others (zbv always has 2). The zero-bubble
// schedules are planned with unit costs (NewWithCosts plans them with
// measured ones).
func New(name string, ranks, micro, virtual int) (*Schedule, error) {
	return NewWithCosts(name, ranks, micro, virtual, Costs{})
}

// NewWithCosts is New, with the zero-bubble schedules (zb1p, zbv) planned
// for the given pass costs per stage (Simulate's Costs; the stages are
// ranks × chunks, 2×ranks for zbv) instead of unit costs: where a rank's
// passes take unequal times (a first stage without an input gradient, a
// last one with the loss, a forward cheaper than a backward) the list
// scheduler then fills the waits it will actually meet. The other
// schedules' orders do not depend on costs.
func NewWithCosts(name string, ranks, micro, virtual int, costs Costs) (*Schedule, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("pipeline: schedule %s: %d ranks (want at least 1)", name, ranks)
	}
	if micro < 1 {
		return nil, fmt.Errorf("pipeline: schedule %s: %d micro-batches (want at least 1)", name, micro)
	}
	s := &Schedule{Name: name, Ranks: ranks, Micro: micro, Chunks: 1, split: name == "zb1p" || name == "zbv"}
	var order [][]compute
	switch name {
	case "gpipe":
		s.setLinear()
		order = gpipeOrder(ranks, micro)
	case "1f1b":
		s.setLinear()
		order = oneFOneBOrder(ranks, micro)
	case "interleaved":
		if virtual == 0 {
			virtual = 2
		}
		if virtual < 2 {
			return nil, fmt.Errorf("pipeline: schedule interleaved needs --virtual-stages of at least 2, got %d", virtual)
		}
		if micro%ranks != 0 {
			return nil, fmt.Errorf("pipeline: schedule interleaved needs --micro-batches (%d) to be a multiple of the pipeline stages (%d)", micro, ranks)
		}
		s.Chunks = virtual
		s.stageRank = make([]int, ranks*virtual)
		for st := range s.stageRank {
			s.stageRank[st] = st % ranks
		}
		order = interleavedOrder(ranks, micro, virtual)
	case "zb1p":
		s.setLinear()
		// Activations awaiting their input gradient as in 1F1B (p-r on
		// rank r); one more micro-batch may wait for its weight gradient,
		// which is what lets weight passes move into the cool-down.
		tot := make([]int, ranks)
		for r := range tot {
			tot[r] = ranks + 1
		}
		if err := costs.check(s); err != nil {
			return nil, err
		}
		var err error
		if order, err = bestZeroBubbleOrder(s, oneFOneBLimits(ranks), tot, costs); err != nil {
			return nil, err
		}
	case "zbv":
		s.Chunks = 2
		s.stageRank = make([]int, 2*ranks)
		for r := 0; r < ranks; r++ {
			s.stageRank[r] = r
			s.stageRank[2*ranks-1-r] = r
		}
		// Two chunks of half a stage each: 2p chunk activations at most,
		// the memory of 1F1B's first stage.
		lim := make([]int, ranks)
		for r := range lim {
			lim[r] = 2 * ranks
		}
		tot := make([]int, ranks)
		for r := range tot {
			tot[r] = 2 * ranks
		}
		if err := costs.check(s); err != nil {
			return nil, err
		}
		var err error
		if order, err = bestZeroBubbleOrder(s, lim, tot, costs); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("pipeline: unknown schedule %q (want one of %s)", name, strings.Join(ScheduleNames(), ", "))
	}
	s.Actions = s.withComm(order)
	return s, nil
}

// Sequential is a one-rank schedule that runs all stages in turn: for
// each micro-batch the forwards in stage order, then the backwards in
// reverse (split into input- and weight-gradient passes when split is
// set). It profiles stages one at a time, with nothing running beside.
func Sequential(stages, micro int, split bool) (*Schedule, error) {
	if stages < 1 || micro < 1 {
		return nil, fmt.Errorf("pipeline: sequential schedule of %d stages and %d micro-batches", stages, micro)
	}
	s := &Schedule{Name: "sequential", Ranks: 1, Micro: micro, Chunks: stages, split: split, stageRank: make([]int, stages)}
	var order []compute
	for i := 0; i < micro; i++ {
		for st := 0; st < stages; st++ {
			order = append(order, compute{Forward, i, st})
		}
		for st := stages - 1; st >= 0; st-- {
			if split {
				order = append(order, compute{BackwardInput, i, st}, compute{BackwardWeight, i, st})
			} else {
				order = append(order, compute{Backward, i, st})
			}
		}
	}
	s.Actions = s.withComm([][]compute{order})
	return s, nil
}

func (s *Schedule) setLinear() {
	s.stageRank = make([]int, s.Ranks)
	for r := range s.stageRank {
		s.stageRank[r] = r
	}
}

// compute is one compute action before the sends and receives are added.
type compute struct {
	kind         Kind
	micro, stage int
}

func gpipeOrder(p, m int) [][]compute {
	out := make([][]compute, p)
	for r := 0; r < p; r++ {
		for i := 0; i < m; i++ {
			out[r] = append(out[r], compute{Forward, i, r})
		}
		for i := 0; i < m; i++ {
			out[r] = append(out[r], compute{Backward, i, r})
		}
	}
	return out
}

// oneFOneBOrder is PipeDream-flush: p-r-1 warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards.
func oneFOneBOrder(p, m int) [][]compute {
	out := make([][]compute, p)
	for r := 0; r < p; r++ {
		warm := min(p-r-1, m)
		f, b := 0, 0
		for ; f < warm; f++ {
			out[r] = append(out[r], compute{Forward, f, r})
		}
		for f < m {
			out[r] = append(out[r], compute{Forward, f, r})
			f++
			out[r] = append(out[r], compute{Backward, b, r})
			b++
		}
		for ; b < m; b++ {
			out[r] = append(out[r], compute{Backward, b, r})
		}
	}
	return out
}

func oneFOneBLimits(p int) []int {
	lim := make([]int, p)
	for r := range lim {
		lim[r] = p - r
	}
	return lim
}

// interleavedOrder is Megatron-LM's interleaved 1F1B: micro-batches go
// through the chunks in groups of p, forwards chunk by chunk, backwards
// in reverse chunk order.
func interleavedOrder(p, m, v int) [][]compute {
	total := m * v
	unit := func(k int, backward bool) (micro, chunk int) {
		group := k / (p * v)
		chunk = (k / p) % v
		if backward {
			chunk = v - 1 - chunk
		}
		return group*p + k%p, chunk
	}
	out := make([][]compute, p)
	for r := 0; r < p; r++ {
		warm := total
		if m != p {
			warm = min((p-r-1)*2+(v-1)*p, total)
		}
		add := func(k int, backward bool) {
			mb, c := unit(k, backward)
			kind := Forward
			if backward {
				kind = Backward
			}
			out[r] = append(out[r], compute{kind, mb, c*p + r})
		}
		f, b := 0, 0
		for ; f < warm; f++ {
			add(f, false)
		}
		for f < total {
			add(f, false)
			f++
			add(b, true)
			b++
		}
		for ; b < total; b++ {
			add(b, true)
		}
	}
	return out
}

// zbPolicy varies the list scheduler's preferences (zeroBubbleOrder).
type zbPolicy struct {
	// lastChunkInputGradFirst: of two ready input gradients, the second
	// chunk's (else the first's).
	lastChunkInputGradFirst bool
	// firstChunkForwardFirst: of two ready forwards, the first chunk's
	// (else the second's, so that micro-batches drain).
	firstChunkForwardFirst bool
	// waitForInputGrad: rather than start a weight-gradient pass, wait for
	// an input gradient that becomes ready within this fraction of the
	// weight pass's cost (the critical path goes first).
	waitForInputGrad float64
}

// zbPolicies are the preferences bestZeroBubbleOrder tries, the default
// (the one that meets the unit-cost bound) first.
func zbPolicies(chunks int) []zbPolicy {
	var out []zbPolicy
	for _, wait := range []float64{0, 0.5} {
		for _, lastBI := range []bool{false, true} {
			for _, firstF := range []bool{false, true} {
				if chunks == 1 && (lastBI || firstF) {
					continue // one chunk: no choice between chunks
				}
				out = append(out, zbPolicy{lastChunkInputGradFirst: lastBI, firstChunkForwardFirst: firstF, waitForInputGrad: wait})
			}
		}
	}
	return out
}

// bestZeroBubbleOrder plans the schedule under each of zbPolicies and
// keeps the one whose simulated makespan with costs is least (of equals,
// the first tried): a greedy list scheduler's preferences that fit equal
// costs do not fit every unequal ones.
func bestZeroBubbleOrder(s *Schedule, limit, total []int, costs Costs) ([][]compute, error) {
	var best [][]compute
	bestSpan := math.Inf(1)
	var firstErr error
	for _, pol := range zbPolicies(s.Chunks) {
		order, err := zeroBubbleOrder(s, limit, total, costs, pol)
		if err == nil {
			trial := *s
			trial.Actions = trial.withComm(order)
			var res *SimResult
			if res, err = Simulate(&trial, costs); err == nil && res.Makespan < bestSpan-1e-9 {
				best, bestSpan = order, res.Makespan
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if best == nil {
		return nil, firstErr
	}
	return best, nil
}

// zeroBubbleOrder builds a zero-bubble schedule (ZB-H1 for one chunk per
// rank, ZB-V for the V placement) by list scheduling with the given pass
// costs (unit costs when they are zero): whenever a rank is free it runs,
// in this order of preference, a ready input-gradient pass (of two chunks,
// the first's), a ready forward while rank r holds fewer than limit[r]
// chunk activations awaiting their input gradient and fewer than total[r]
// awaiting either gradient, and a pending weight-gradient pass. Weight-
// gradient passes thus fill the time a rank would otherwise wait. A pass
// is ready on another rank costs.Comm after it finishes.
func zeroBubbleOrder(s *Schedule, limit, total []int, costs Costs, pol zbPolicy) ([][]compute, error) {
	p, m, S := s.Ranks, s.Micro, s.Stages()
	const notDone = -1.0
	// finish time of F and BI per (micro, stage)
	fDone := make([][]float64, m)
	bDone := make([][]float64, m)
	for i := range fDone {
		fDone[i] = make([]float64, S)
		bDone[i] = make([]float64, S)
		for j := range fDone[i] {
			fDone[i][j], bDone[i][j] = notDone, notDone
		}
	}
	// arrival is when a pass of stage from, finished at t0, reaches
	// stage to (costs.Comm later when they are on different ranks).
	arrival := func(t0 float64, from, to int) float64 {
		if s.stageRank[from] != s.stageRank[to] {
			t0 += costs.Comm
		}
		return t0
	}
	// ready reports whether pass (of stage from, finished at t0) is
	// usable by stage to at time t.
	ready := func(t0 float64, from, to int, t float64) bool {
		return t0 != notDone && arrival(t0, from, to) <= t+1e-12
	}
	out := make([][]compute, p)
	inflight := make([]int, p)
	held := make([]int, p)
	pendingW := make([][]compute, p)
	nextF := make([][]int, p) // per rank, per local chunk: next micro to forward
	stagesOf := make([][]int, p)
	for r := range nextF {
		nextF[r] = make([]int, s.Chunks)
		stagesOf[r] = s.StagesOf(r)
	}
	free := make([]float64, p) // when each rank is free
	// tried[r]: rank r found nothing to start at free[r] (since the last
	// start anywhere)
	tried := make([]bool, p)
	var finishes []float64 // finish times of the passes started, to wait for
	remaining := m * S * 3
	for guard := (remaining + 1) * (4*p + 4) * 4; remaining > 0 && guard > 0; guard-- {
		// the rank free earliest decides next: of equals, one that has
		// not tried at this time, the lowest
		r := 0
		for k := 1; k < p; k++ {
			if free[k] < free[r]-1e-12 || free[k] <= free[r]+1e-12 && tried[r] && !tried[k] {
				r = k
			}
		}
		t := free[r]
		stages := stagesOf[r]
		var pick *compute
		for kk := 0; kk < len(stages) && pick == nil; kk++ {
			k := kk
			if pol.lastChunkInputGradFirst {
				k = len(stages) - 1 - kk
			}
			st := stages[k]
			for i := 0; i < m; i++ {
				if bDone[i][st] != notDone || !ready(fDone[i][st], st, st, t) {
					continue
				}
				if st == S-1 || ready(bDone[i][st+1], st+1, st, t) {
					pick = &compute{BackwardInput, i, st}
				}
				break // input gradients of a stage go in micro order
			}
		}
		if pick == nil && inflight[r] < limit[r] && held[r] < total[r] {
			// forward: the chunk that is furthest along first, so that
			// micro-batches drain
			for kk := 0; kk < len(stages) && pick == nil; kk++ {
				k := len(stages) - 1 - kk
				if pol.firstChunkForwardFirst {
					k = kk
				}
				st := stages[k]
				i := nextF[r][k]
				if i >= m {
					continue
				}
				if k < len(stages)-1 && (inflight[r] >= limit[r]-1 || held[r] >= total[r]-1) {
					// the last slot is the last chunk's: were it an
					// earlier chunk's, every activation the rank holds
					// could be waiting for a forward it has no room for
					continue
				}
				if st == 0 || ready(fDone[i][st-1], st-1, st, t) {
					pick = &compute{Forward, i, st}
				}
			}
		}
		if pick == nil && len(pendingW[r]) > 0 && pol.waitForInputGrad > 0 {
			// an input gradient about to be ready goes before a weight pass
			soon := -1.0
			for _, st := range stages {
				for i := 0; i < m; i++ {
					if bDone[i][st] != notDone {
						continue
					}
					at := fDone[i][st]
					if at == notDone {
						break
					}
					if st < S-1 {
						up := bDone[i][st+1]
						if up == notDone {
							break
						}
						at = max(at, arrival(up, st+1, st))
					}
					if soon < 0 || at < soon {
						soon = at
					}
					break
				}
			}
			w := pendingW[r][0]
			if soon > t && soon-t < pol.waitForInputGrad*costs.of(BackwardWeight, w.stage) {
				free[r], tried[r] = soon, false
				continue
			}
		}
		if pick == nil && len(pendingW[r]) > 0 {
			w := pendingW[r][0]
			pendingW[r] = pendingW[r][1:]
			pick = &w
		}
		if pick == nil && !tried[r] {
			tried[r] = true // let the other ranks free at t decide first
			continue
		}
		if pick == nil {
			// every rank free at t tried: wait for the next event (a
			// pass to finish and reach this rank, or another rank to
			// decide)
			next := -1.0
			later := func(at float64) {
				if at > t+1e-12 && (next < 0 || at < next) {
					next = at
				}
			}
			for _, f := range finishes {
				later(f)
				later(f + costs.Comm)
			}
			for _, f := range free {
				later(f)
			}
			if next < 0 {
				break // nothing will change: the caller's lists are incomplete
			}
			free[r], tried[r] = next, false
			continue
		}
		for k := range tried {
			tried[k] = false // a start may make a pass ready at once
		}
		c := *pick
		end := t + costs.of(c.kind, c.stage)
		free[r] = end
		finishes = append(finishes, end)
		out[r] = append(out[r], c)
		remaining--
		switch c.kind {
		case Forward:
			fDone[c.micro][c.stage] = end
			inflight[r]++
			held[r]++
			for k, x := range stages {
				if x == c.stage {
					nextF[r][k]++
				}
			}
		case BackwardInput:
			bDone[c.micro][c.stage] = end
			inflight[r]--
			pendingW[r] = append(pendingW[r], compute{BackwardWeight, c.micro, c.stage})
		case BackwardWeight:
			held[r]--
		}
	}
	if remaining > 0 {
		return nil, fmt.Errorf("pipeline: schedule %s: the list scheduler placed %d of %d passes and can place no more (%d ranks, %d micro-batches)", s.Name, m*S*3-remaining, m*S*3, p, m)
	}
	return out, nil
}

// withComm inserts the sends and receives: a receive right before the
// compute action that needs the tensor, a send right after the one that
// makes it. Stages on the same rank hand tensors over without either.
func (s *Schedule) withComm(order [][]compute) [][]Action {
	S := s.Stages()
	out := make([][]Action, len(order))
	for r, list := range order {
		for _, c := range list {
			switch c.kind {
			case Forward:
				if c.stage > 0 && s.stageRank[c.stage-1] != r {
					out[r] = append(out[r], Action{RecvAct, c.micro, c.stage, s.stageRank[c.stage-1]})
				}
			case Backward, BackwardInput:
				if c.stage < S-1 && s.stageRank[c.stage+1] != r {
					out[r] = append(out[r], Action{RecvGrad, c.micro, c.stage + 1, s.stageRank[c.stage+1]})
				}
			}
			out[r] = append(out[r], Action{Kind: c.kind, Micro: c.micro, Stage: c.stage, Peer: r})
			switch c.kind {
			case Forward:
				if c.stage < S-1 && s.stageRank[c.stage+1] != r {
					out[r] = append(out[r], Action{SendAct, c.micro, c.stage + 1, s.stageRank[c.stage+1]})
				}
			case Backward, BackwardInput:
				if c.stage > 0 && s.stageRank[c.stage-1] != r {
					out[r] = append(out[r], Action{SendGrad, c.micro, c.stage, s.stageRank[c.stage-1]})
				}
			}
		}
	}
	return out
}

// String prints the lists, one line per rank:
//
//	rank 0: F0.s0 sendA0.s1@r1 F1.s0 ...
func (s *Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule %s: %d ranks, %d micro-batches, %d chunks per rank\n", s.Name, s.Ranks, s.Micro, s.Chunks)
	for r, list := range s.Actions {
		fmt.Fprintf(&b, "rank %d (stages %v):", r, s.StagesOf(r))
		for _, a := range list {
			b.WriteByte(' ')
			b.WriteString(a.String())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Costs gives the time of each compute action in the simulator; nil
// fields and zero values mean unit costs (F = 1, BI = 1, BW = 1,
// B = BI+BW) and free communication.
type Costs struct {
	// Forward, BackwardInput and BackwardWeight of each stage; Backward is
	// their sum. A nil slice means 1 for every stage.
	Forward, BackwardInput, BackwardWeight []float64
	// Comm is the time from a send to its receive being possible.
	Comm float64
}

// check refuses costs that do not fit schedule s: a slice with another
// length than its stages, or a negative or non-finite cost.
func (c Costs) check(s *Schedule) error {
	for _, v := range []struct {
		name string
		c    []float64
	}{{"forward", c.Forward}, {"input-gradient", c.BackwardInput}, {"weight-gradient", c.BackwardWeight}} {
		if v.c != nil && len(v.c) != s.Stages() {
			return fmt.Errorf("pipeline: schedule %s: %s costs for %d stages, the schedule has %d", s.Name, v.name, len(v.c), s.Stages())
		}
		for st, x := range v.c {
			if !(x >= 0) || math.IsInf(x, 0) {
				return fmt.Errorf("pipeline: schedule %s: stage %d's %s cost is %v (want a finite time, at least 0)", s.Name, st, v.name, x)
			}
		}
	}
	if !(c.Comm >= 0) || math.IsInf(c.Comm, 0) {
		return fmt.Errorf("pipeline: schedule %s: communication cost %v (want a finite time, at least 0)", s.Name, c.Comm)
	}
	return nil
}

func (c Costs) of(k Kind, stage int) float64 {
	get := func(v []float64) float64 {
		if v == nil {
			return 1
		}
		return v[stage]
	}
	switch k {
	case Forward:
		return get(c.Forward)
	case Backward:
		return get(c.BackwardInput) + get(c.BackwardWeight)
	case BackwardInput:
		return get(c.BackwardInput)
	case BackwardWeight:
		return get(c.BackwardWeight)
	}
	return 0
}

// SimResult is what Simulate measured.
type SimResult struct {
	// Makespan is the time from the first action to the last.
	Makespan float64
	// Busy[r] is rank r's compute time, Idle[r] the rest of the makespan.
	Busy, Idle []float64
	// PeakActivations[r] is the most (micro-batch, stage) activations rank
	// r held at once: from a forward until the backward (or the weight
	// gradient pass) that releases them.
	PeakActivations []int
}

// Bubble is the schedule's bubble rate: the largest rank idle time over
// its compute time.
func (r *SimResult) Bubble() float64 {
	worst := 0.0
	for i := range r.Busy {
		worst = max(worst, r.Idle[i]/r.Busy[i])
	}
	return worst
}

// IdleFraction is rank r's idle time over the makespan.
func (r *SimResult) IdleFraction(rank int) float64 { return r.Idle[rank] / r.Makespan }

type msgKey struct {
	kind         Kind // SendAct or SendGrad
	micro, stage int
}

// Simulate runs the action lists with the given costs. It checks that every
// (micro-batch, stage) runs each of its passes exactly once, on the rank
// that holds the stage, after what it depends on, that every receive has
// its send, and that the lists cannot deadlock (sends never block; a
// receive waits for its send).
func Simulate(s *Schedule, costs Costs) (*SimResult, error) {
	p, S := s.Ranks, s.Stages()
	if len(s.Actions) != p {
		return nil, fmt.Errorf("pipeline: schedule %s has %d action lists for %d ranks", s.Name, len(s.Actions), p)
	}
	for _, v := range [][]float64{costs.Forward, costs.BackwardInput, costs.BackwardWeight} {
		if v != nil && len(v) != S {
			return nil, fmt.Errorf("pipeline: costs for %d stages, the schedule has %d", len(v), S)
		}
	}
	type pass struct {
		kind         Kind
		micro, stage int
	}
	done := map[pass]float64{}   // compute pass -> finish time
	sent := map[msgKey]float64{} // message -> time it can be received
	recvd := map[msgKey]bool{}   // message received (by its rank)
	clock := make([]float64, p)  // rank's time
	pc := make([]int, p)         // next action
	busy := make([]float64, p)   // compute time
	live := make([]int, p)       // activations held
	peak := make([]int, p)       // most activations held
	split := s.SplitBackward()
	// has reports whether pass q is finished (on rank r: locally, or
	// received from another rank), and at what time.
	needLocal := func(r int, q pass) (float64, error, bool) {
		t, ok := done[q]
		if !ok {
			return 0, nil, false
		}
		return t, nil, true
	}
	ready := func(r int, a Action) (float64, bool, error) {
		at := clock[r]
		switch a.Kind {
		case RecvAct, RecvGrad:
			k := msgKey{SendAct, a.Micro, a.Stage}
			if a.Kind == RecvGrad {
				k.kind = SendGrad
			}
			if recvd[k] {
				return 0, false, fmt.Errorf("rank %d: %v received twice", r, a)
			}
			t, ok := sent[k]
			return max(at, t), ok, nil
		case SendAct, SendGrad:
			q := pass{Forward, a.Micro, a.Stage - 1}
			if a.Kind == SendGrad {
				q = pass{Backward, a.Micro, a.Stage}
				if split {
					q.kind = BackwardInput
				}
			}
			if a.Stage <= 0 || a.Stage >= S || s.stageRank[q.stage] != r {
				return 0, false, fmt.Errorf("rank %d: %v sends a tensor of a stage it does not hold", r, a)
			}
			if _, ok := done[q]; !ok {
				return 0, false, fmt.Errorf("rank %d: %v comes before the pass that makes the tensor", r, a)
			}
			if s.stageRank[a.Stage-1+btoi(a.Kind == SendAct)] != a.Peer {
				return 0, false, fmt.Errorf("rank %d: %v goes to the wrong rank", r, a)
			}
			return at, true, nil
		}
		// compute
		if a.Stage < 0 || a.Stage >= S || s.stageRank[a.Stage] != r {
			return 0, false, fmt.Errorf("rank %d: %v runs a stage the rank does not hold", r, a)
		}
		if a.Micro < 0 || a.Micro >= s.Micro {
			return 0, false, fmt.Errorf("rank %d: %v: micro-batch out of range", r, a)
		}
		if split && a.Kind == Backward || !split && (a.Kind == BackwardInput || a.Kind == BackwardWeight) {
			return 0, false, fmt.Errorf("rank %d: %v: this schedule's backward passes are %s", r, a, map[bool]string{true: "split", false: "whole"}[split])
		}
		if _, dup := done[pass{a.Kind, a.Micro, a.Stage}]; dup {
			return 0, false, fmt.Errorf("rank %d: %v runs twice", r, a)
		}
		// dependencies
		var deps []pass
		var msgs []msgKey
		switch a.Kind {
		case Forward:
			if a.Stage > 0 {
				if s.stageRank[a.Stage-1] == r {
					deps = append(deps, pass{Forward, a.Micro, a.Stage - 1})
				} else {
					msgs = append(msgs, msgKey{SendAct, a.Micro, a.Stage})
				}
			}
		case Backward, BackwardInput:
			deps = append(deps, pass{Forward, a.Micro, a.Stage})
			if a.Stage < S-1 {
				bk := Backward
				if split {
					bk = BackwardInput
				}
				if s.stageRank[a.Stage+1] == r {
					deps = append(deps, pass{bk, a.Micro, a.Stage + 1})
				} else {
					msgs = append(msgs, msgKey{SendGrad, a.Micro, a.Stage + 1})
				}
			}
		case BackwardWeight:
			deps = append(deps, pass{BackwardInput, a.Micro, a.Stage})
		}
		for _, d := range deps {
			t, _, ok := needLocal(r, d)
			if !ok {
				return 0, false, fmt.Errorf("rank %d: %v runs before %s%d.s%d, which this rank runs later or never", r, a, d.kind, d.micro, d.stage)
			}
			at = max(at, t)
		}
		for _, k := range msgs {
			if !recvd[k] {
				return 0, false, fmt.Errorf("rank %d: %v runs before receiving its input (%s%d.s%d)", r, a, map[Kind]string{SendAct: "recvA", SendGrad: "recvG"}[k.kind], k.micro, k.stage)
			}
		}
		return at, true, nil
	}
	for {
		progress, finished := false, true
		for r := 0; r < p; r++ {
			for pc[r] < len(s.Actions[r]) {
				a := s.Actions[r][pc[r]]
				start, ok, err := ready(r, a)
				if err != nil {
					return nil, fmt.Errorf("pipeline: schedule %s: %w", s.Name, err)
				}
				if !ok {
					break
				}
				switch a.Kind {
				case RecvAct, RecvGrad:
					k := msgKey{SendAct, a.Micro, a.Stage}
					if a.Kind == RecvGrad {
						k.kind = SendGrad
					}
					recvd[k] = true
					clock[r] = start
				case SendAct, SendGrad:
					sent[msgKey{a.Kind, a.Micro, a.Stage}] = clock[r] + costs.Comm
				default:
					c := costs.of(a.Kind, a.Stage)
					clock[r] = start + c
					busy[r] += c
					done[pass{a.Kind, a.Micro, a.Stage}] = clock[r]
					switch {
					case a.Kind == Forward:
						live[r]++
						peak[r] = max(peak[r], live[r])
					case a.Kind == Backward || a.Kind == BackwardWeight:
						live[r]--
					}
				}
				pc[r]++
				progress = true
			}
			finished = finished && pc[r] == len(s.Actions[r])
		}
		if finished {
			break
		}
		if !progress {
			var blocked []string
			for r := 0; r < p; r++ {
				if pc[r] < len(s.Actions[r]) {
					blocked = append(blocked, fmt.Sprintf("rank %d waits at %v", r, s.Actions[r][pc[r]]))
				}
			}
			return nil, fmt.Errorf("pipeline: schedule %s deadlocks: %s", s.Name, strings.Join(blocked, "; "))
		}
	}
	// every pass ran
	want := []Kind{Forward, Backward}
	if split {
		want = []Kind{Forward, BackwardInput, BackwardWeight}
	}
	var missing []string
	for i := 0; i < s.Micro; i++ {
		for st := 0; st < S; st++ {
			for _, k := range want {
				if _, ok := done[pass{k, i, st}]; !ok {
					missing = append(missing, fmt.Sprintf("%s%d.s%d", k, i, st))
				}
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("pipeline: schedule %s never runs %s", s.Name, strings.Join(missing, ", "))
	}
	for k := range sent {
		if !recvd[k] {
			return nil, fmt.Errorf("pipeline: schedule %s: %s%d.s%d is sent and never received", s.Name, k.kind, k.micro, k.stage)
		}
	}
	res := &SimResult{Busy: busy, Idle: make([]float64, p), PeakActivations: peak}
	for r := 0; r < p; r++ {
		res.Makespan = max(res.Makespan, clock[r])
	}
	for r := 0; r < p; r++ {
		res.Idle[r] = res.Makespan - busy[r]
	}
	return res, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// InFlight is the most micro-batches whose forward pass of stage st has
// run and whose last backward pass (Backward, or BackwardWeight in the
// split schedules) has not, over the schedule: how many micro-batches'
// activations the stage holds at once. The plan's memory estimate takes
// it as PartitionOptions.InFlight.
func (s *Schedule) InFlight(st int) int {
	if st < 0 || st >= len(s.stageRank) {
		return 0
	}
	n, most := 0, 0
	for _, a := range s.Actions[s.stageRank[st]] {
		if a.Stage != st {
			continue
		}
		switch {
		case a.Kind == Forward:
			n++
			most = max(most, n)
		case a.Kind == Backward, a.Kind == BackwardWeight:
			n--
		}
	}
	return most
}
