package pipeline

import (
	"context"
	"fmt"

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
	return Partition(m, opts)
}
