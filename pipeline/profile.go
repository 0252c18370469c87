package pipeline

import (
	"context"
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/graph"
)

// nodeOverhead is the share of a pass's measured time ProfilePartition
// gives every node besides its estimated cost: what a kernel call costs
// whatever its size (measured: vit_tiny's 4-stage cut by estimate alone
// was 30% off balance, mostly from many small nodes).
const nodeOverhead = 3e-6

// ProfilePartition is --partition profile: it cuts m into fine pieces
// (four per stage, at most one per node), runs them one at a time on the
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
	fine := min(4*max(opts.Stages, len(opts.SplitAt)+1), len(est.Stages[0].Nodes))
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
	r, err := NewRunner(plan, seq, RunnerConfig{Stage: sc})
	if err != nil {
		return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
	}
	if err := r.ForwardBackward(ctx, micro); err != nil { // compiles and warms up
		return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
	}
	r.ResetProfile()
	for i := 0; i < steps; i++ {
		if err := r.ForwardBackward(ctx, micro); err != nil {
			return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
		}
	}
	nodeEst := map[string]float64{}
	for _, nd := range plan.g.Nodes {
		f, bytes := plan.nodeCost(nd)
		nodeEst[nd.Label()] = 3*max(float64(f)/flopRate, float64(bytes)/byteRate) + nodeOverhead
	}
	measured := map[string]float64{}
	for s, p := range r.Profile() {
		t := (p.Forward + p.Backward).Seconds()
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
	te, err := measureStages(ctx, byEst, sc, micro, steps)
	if err != nil {
		return nil, err
	}
	if imbalance(te) < imbalance(tb) {
		// The estimate's cut, with each stage's cost scaled to what it
		// measured, so that the plan's estimates are measured times.
		secs := map[string]float64{}
		for s, st := range byEst.Stages {
			var est float64
			for _, name := range st.Nodes {
				est += best.opts.NodeSeconds[name]
			}
			for _, name := range st.Nodes {
				if est > 0 {
					secs[name] = best.opts.NodeSeconds[name] * te[s] / est
				}
			}
		}
		next := opts
		next.NodeSeconds, next.SplitAt = secs, nil
		constant := map[string]bool{}
		for _, n := range m.Graph.Nodes {
			if isConstantNode(n) {
				constant[n.Label()] = true
			}
		}
		for _, st := range byEst.Stages[1:] {
			for _, name := range st.Nodes {
				if !constant[name] {
					next.SplitAt = append(next.SplitAt, name)
					break
				}
			}
		}
		if p, err := Partition(m, next); err == nil && sameCuts(p, byEst) {
			return p, nil
		}
		return byEst, nil
	}
	return best, nil
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
	r, err := NewRunner(plan, seq, RunnerConfig{Stage: sc})
	if err != nil {
		return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
	}
	return MinStageSeconds(ctx, r, micro, steps)
}

// MinStageSeconds runs r's schedule steps times after one warm-up step
// (forward and backward, no optimizer step) and returns each stage's least
// forward+backward time of a step.
func MinStageSeconds(ctx context.Context, r *Runner, micro []Batch, steps int) ([]float64, error) {
	times := make([]float64, len(r.Plan.Stages))
	for i := range times {
		times[i] = math.Inf(1)
	}
	for i := 0; i <= max(steps, 1); i++ {
		r.ResetProfile()
		if err := r.ForwardBackward(ctx, micro); err != nil {
			return nil, fmt.Errorf("pipeline: --partition profile: %w", err)
		}
		if i == 0 {
			continue // the first step compiles and warms up
		}
		for s, p := range r.Profile() {
			times[s] = min(times[s], (p.Forward + p.Backward).Seconds())
		}
	}
	return times, nil
}
