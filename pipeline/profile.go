package pipeline

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/onnxtrain/onnxtrain/graph"
)

// nodeOverhead is the share of a pass's measured time ProfilePartition
// gives every node besides its estimated cost: what a kernel call costs
// whatever its size (measured: vit_tiny's 4-stage cut by estimate alone
// was 30% off balance, mostly from many small nodes).
const nodeOverhead = 3e-6

// profilePieces is the least number of pieces ProfilePartition measures.
// With four pieces a stage (its first choice) the transformer fixture's
// 4-stage cut landed within 15% of the mean in one run of six: its stages
// of a few nodes each put a cut inside a piece by the estimate. With each
// node its own piece it lands within 15% every time (docs/pipeline.md).
const profilePieces = 96

// ProfilePartition is --partition profile: it cuts m into fine pieces
// (sixteen per stage and at least profilePieces, at most one per node: on
// models of up to that many nodes every node is measured by itself, and
// no estimate decides where inside a piece a cut falls), runs them one at a time on the
// given micro-batches for steps steps, spreads each piece's measured
// forward and backward time over its nodes (in proportion to their
// estimated cost plus a fixed per-node overhead), and cuts again on those
// measured costs. sc builds the pieces' programs as for training.
func ProfilePartition(ctx context.Context, m *graph.Model, opts PartitionOptions, sc StageConfig, micro []Batch, steps int) (*Plan, error) {
	if steps < 1 {
		steps = 1
	}
	est, err := Partition(m, PartitionOptions{Stages: 1, BatchSize: opts.BatchSize, InputShapes: opts.InputShapes})
	if err != nil {
		return nil, err
	}
	fine := min(max(16*max(opts.Stages, len(opts.SplitAt)+1), profilePieces), len(est.Stages[0].Nodes))
	fopts := opts
	fopts.Stages, fopts.SplitAt, fopts.StageMemory, fopts.NodeSeconds = fine, nil, 0, nil
	plan, err := Partition(m, fopts)
	if err != nil {
		return nil, err
	}
	seq, err := Sequential(fine, len(micro), false)
	if err != nil {
		return nil, err
	}
	sc.SplitBackward = false
	r, err := NewRunner(plan, seq, RunnerConfig{Stage: sc, Workers: profileWorkers})
	if err != nil {
		return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
	}
	pieces, err := MinStageSeconds(ctx, r, micro, steps)
	if err != nil {
		return nil, err
	}
	nodeEst := map[string]float64{}
	for _, nd := range plan.g.Nodes {
		f, bytes := plan.nodeCost(nd)
		nodeEst[nd.Label()] = 3*max(float64(f)/flopRate, float64(bytes)/byteRate) + nodeOverhead
	}
	measured := map[string]float64{}
	for s, t := range pieces {
		var tot float64
		for _, name := range plan.Stages[s].Nodes {
			tot += nodeEst[name]
		}
		for _, name := range plan.Stages[s].Nodes {
			measured[name] = t * nodeEst[name] / tot
		}
	}
	opts.NodeSeconds = measured
	cut, err := Partition(m, opts)
	if err != nil || len(opts.SplitAt) > 0 || opts.Stages < 2 {
		return cut, err
	}
	best, err := refinePartition(ctx, m, opts, sc, micro, steps, cut)
	if err != nil {
		return nil, err
	}
	// The cost model's own cut is a candidate too: on small models (stages
	// of well under a millisecond) the pieces' measurements can mislead
	// more than the estimate does. Keep whichever cut measured better.
	eopts := opts
	eopts.NodeSeconds = nil
	byEst, err := Partition(m, eopts)
	if err != nil || sameCuts(byEst, best) {
		return best, nil
	}
	tb, err := measureStages(ctx, best, sc, micro, steps)
	if err != nil {
		return nil, err
	}
	chosen, times := best, tb
	if !sameCuts(byEst, best) {
		te, err := measureStages(ctx, byEst, sc, micro, steps)
		if err != nil {
			return nil, err
		}
		if imbalance(te) < imbalance(tb) {
			chosen, times = byEst, te
		}
	}
	base := best.opts.NodeSeconds
	if chosen, times, err = moveCuts(ctx, m, opts, sc, micro, steps, chosen, times, base); err != nil {
		return nil, err
	}
	return withMeasured(m, opts, chosen, times, base), nil
}

// constantNodes are the Constant nodes of m, which every stage reading them
// copies (never a place to cut).
func constantNodes(m *graph.Model) map[string]bool {
	constant := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		if isConstantNode(n) {
			constant[n.Label()] = true
		}
	}
	return constant
}

// cutOrder lists plan's nodes in stage order without the Constant nodes,
// and where each stage after the first starts in that list.
func cutOrder(plan *Plan, constant map[string]bool) (order []string, starts []int) {
	seen := map[string]bool{}
	for s, st := range plan.Stages {
		if s > 0 {
			starts = append(starts, len(order))
		}
		for _, name := range st.Nodes {
			if !constant[name] && !seen[name] {
				seen[name] = true
				order = append(order, name)
			}
		}
	}
	return order, starts
}

// withMeasured is plan with per-node costs scaled so that each stage's
// estimated time is the time it measured (times), for a plan whose
// estimates say what was measured; plan itself when the same cuts cannot
// be made again.
func withMeasured(m *graph.Model, opts PartitionOptions, plan *Plan, times []float64, base map[string]float64) *Plan {
	secs := map[string]float64{}
	for s, st := range plan.Stages {
		var est float64
		for _, name := range st.Nodes {
			est += base[name]
		}
		for _, name := range st.Nodes {
			if est > 0 {
				secs[name] = base[name] * times[s] / est
			}
		}
	}
	order, starts := cutOrder(plan, constantNodes(m))
	next := opts
	next.NodeSeconds, next.SplitAt = secs, nil
	for _, i := range starts {
		next.SplitAt = append(next.SplitAt, order[i])
	}
	if p, err := Partition(m, next); err == nil && sameCuts(p, plan) {
		return p
	}
	return plan
}

// moveRounds bounds moveCuts' rounds; moveMaxStage is the mean measured
// stage time above which it does not run (stages that long hold many
// nodes, and moving one node changes their balance by little).
const (
	moveRounds   = 6
	moveMaxStage = 0.05
)

// moveCuts improves plan by measurement where cutting on per-node costs
// cannot: stages of a few nodes, where one node is a large share of a
// stage and the per-node costs (spread from measured pieces) are off by
// more than that share. Each round moves the slowest stage's first node
// to the stage before it, or its last node to the stage after it,
// measures both candidates, and keeps the better one if it is better
// balanced than the plan; it stops when neither is.
func moveCuts(ctx context.Context, m *graph.Model, opts PartitionOptions, sc StageConfig, micro []Batch, steps int, plan *Plan, times []float64, base map[string]float64) (*Plan, []float64, error) {
	var sum float64
	for _, t := range times {
		sum += t
	}
	if len(plan.Stages) < 2 || sum/float64(len(times)) > moveMaxStage {
		return plan, times, nil
	}
	constant := constantNodes(m)
	for round := 0; round < moveRounds; round++ {
		order, starts := cutOrder(plan, constant)
		// bounds[s] is where stage s starts in order; bounds[S] the end
		bounds := append(append([]int{0}, starts...), len(order))
		// each cut moves one node from the slower of its two stages to
		// the faster, if that leaves the slower one a node
		var cands [][]int
		for b := range starts {
			c := append([]int(nil), starts...)
			if times[b] > times[b+1] && bounds[b+1]-1 > bounds[b] {
				c[b]--
			} else if times[b+1] > times[b] && bounds[b+1]+1 < bounds[b+2] {
				c[b]++
			} else {
				continue
			}
			cands = append(cands, c)
		}
		var bestPlan *Plan
		var bestTimes []float64
		for _, c := range cands {
			next := opts
			next.NodeSeconds, next.SplitAt = base, nil
			for _, i := range c {
				next.SplitAt = append(next.SplitAt, order[i])
			}
			p, err := Partition(m, next)
			if err != nil {
				continue // not a place one can cut (a stage left empty)
			}
			t, err := measureStages(ctx, p, sc, micro, steps)
			if err != nil {
				return nil, nil, err
			}
			if bestTimes == nil || imbalance(t) < imbalance(bestTimes) {
				bestPlan, bestTimes = p, t
			}
		}
		if bestTimes == nil || imbalance(bestTimes) >= imbalance(times) {
			break
		}
		plan, times = bestPlan, bestTimes
	}
	return plan, times, nil
}

// imbalance is the slowest of times over their mean, less one.
func imbalance(times []float64) float64 {
	var sum, worst float64
	for _, t := range times {
		sum, worst = sum+t, max(worst, t)
	}
	return worst/(sum/float64(len(times))) - 1
}

// sameCuts reports whether a and b cut at the same nodes.
func sameCuts(a, b *Plan) bool {
	if len(a.Stages) != len(b.Stages) {
		return false
	}
	for s := range a.Stages {
		if len(a.Stages[s].Nodes) != len(b.Stages[s].Nodes) {
			return false
		}
	}
	return true
}

// refineRounds bounds refinePartition's measure-and-recut rounds.
const refineRounds = 3

// refinePartition measures the stages of cut as they are (one at a time,
// on the micro-batches), scales the per-node costs of each stage by its
// measured over its estimated time, cuts again, and repeats while the
// slowest stage is more than 5% above the mean, for at most refineRounds
// rounds; it returns the cut whose measured balance was best. The pieces
// measured first each carry a fixed cost (a pass's launch, the transfer of
// its inputs) that the whole stages do not: measuring the stages
// themselves removes that error.
func refinePartition(ctx context.Context, m *graph.Model, opts PartitionOptions, sc StageConfig, micro []Batch, steps int, cut *Plan) (*Plan, error) {
	best, bestImb := cut, math.Inf(1)
	for round := 0; ; round++ {
		times, err := measureStages(ctx, cut, sc, micro, steps)
		if err != nil {
			return nil, err
		}
		var sum, worst float64
		for _, t := range times {
			sum, worst = sum+t, max(worst, t)
		}
		imb := worst/(sum/float64(len(times))) - 1
		if imb < bestImb {
			best, bestImb = cut, imb
		}
		if imb <= 0.05 || round == refineRounds {
			return best, nil
		}
		secs := make(map[string]float64, len(cut.opts.NodeSeconds))
		for k, v := range cut.opts.NodeSeconds {
			secs[k] = v
		}
		for s, st := range cut.Stages {
			var est float64
			for _, name := range st.Nodes {
				est += secs[name]
			}
			if est <= 0 || times[s] <= 0 {
				continue
			}
			for _, name := range st.Nodes {
				secs[name] *= times[s] / est
			}
		}
		next := opts
		next.NodeSeconds = secs
		if cut, err = Partition(m, next); err != nil {
			return nil, err
		}
	}
}

// measureStages times each stage of plan (forward and backward of every
// micro-batch, one stage at a time): the least time of steps steps after a
// warm-up, which on a shared machine is the stable figure (a step that
// another process preempted only ever takes longer).
func measureStages(ctx context.Context, plan *Plan, sc StageConfig, micro []Batch, steps int) ([]float64, error) {
	seq, err := Sequential(len(plan.Stages), len(micro), false)
	if err != nil {
		return nil, err
	}
	r, err := NewRunner(plan, seq, RunnerConfig{Stage: sc, Workers: profileWorkers})
	if err != nil {
		return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
	}
	return MinStageSeconds(ctx, r, micro, steps)
}

// oneWorker reports whether every rank of r runs on a device of one
// worker, whose kernels then run on the rank's own goroutine: its thread's
// CPU time is then the passes' whole cost, without the time other
// processes took of the core (what makes wall-clock profiles of stages
// of a tenth of a millisecond unrepeatable on a loaded machine).
func oneWorker(r *Runner) bool {
	if len(r.Workers) == 0 {
		return false
	}
	for _, w := range r.Workers {
		if w != 1 {
			return false
		}
	}
	return true
}

// profileWorkers is the worker count of the runners that --partition
// profile measures with: one, timed by thread CPU time (oneWorker).
var profileWorkers = []int{1}

// Repetitions of MinStageSeconds: profileRuns runs (3 when the warm-up
// step alone took profileRunTime), each of at least the steps asked and at
// least profileRunTime long (at most profileMaxSteps steps): stages of a
// tenth of a millisecond (the transformer fixture's) get hundreds of
// repetitions, large ones the steps asked.
const (
	profileRuns     = 5
	profileRunTime  = 30 * time.Millisecond
	profileMaxSteps = 400
)

// MinStageSeconds runs r's schedule (forward and backward, no optimizer
// step) after one warm-up step, in profileRuns runs of at least steps
// steps and profileRunTime each, and returns per stage the median over
// the runs of its least forward+backward time of a micro-batch (averaged
// over a step's micro-batches) in the run. The
// least time discards the steps another process preempted (they only ever
// take longer); the median over runs discards a run spent wholly under a
// burst of load, or in a lucky state no other run saw.
func MinStageSeconds(ctx context.Context, r *Runner, micro []Batch, steps int) ([]float64, error) {
	if oneWorker(r) {
		r.cpuClock = true
		defer func() { r.cpuClock = false }()
	}
	r.ResetProfile()
	warm := time.Now()
	if err := r.ForwardBackward(ctx, micro); err != nil { // compiles and warms up
		return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
	}
	nruns := profileRuns
	if time.Since(warm) > profileRunTime {
		nruns = 3 // long steps: their least time is stable sooner
	}
	n := len(r.Plan.Stages)
	runs := make([][]float64, n)
	for run := 0; run < nruns; run++ {
		least := make([]float64, n)
		for i := range least {
			least[i] = math.Inf(1)
		}
		start := time.Now()
		for i := 0; i < profileMaxSteps && (i < max(steps, 1) || time.Since(start) < profileRunTime); i++ {
			r.ResetProfile()
			if err := r.ForwardBackward(ctx, micro); err != nil {
				return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
			}
			for s, p := range r.Profile() {
				if r.Stages[s] == nil {
					continue
				}
				// a micro-batch's forward and backward, averaged over the step
				least[s] = min(least[s], (p.Forward + p.Backward + p.BackwardInput + p.BackwardWeight).Seconds())
			}
		}
		for s := range least {
			runs[s] = append(runs[s], least[s])
		}
	}
	times := make([]float64, n)
	for s, v := range runs {
		sort.Float64s(v)
		times[s] = v[len(v)/2]
	}
	return times, nil
}
