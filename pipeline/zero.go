package pipeline

import (
	"context"
	"fmt"
	"sort"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// ZeRO-1 with pipelining (RunnerConfig.Zero): the optimizer state of each
// stage is sharded over the data-parallel replicas of that stage. Every
// replica of a rank holds the same stages; each of their parameters is
// owned by one replica (whole parameters, spread by size), whose optimizer
// alone holds its state and steps it. The gradients are averaged over the
// replicas as without ZeRO (every replica then holds the whole averaged
// gradient of its stages, so clipping is unchanged), each replica steps
// the parameters it owns, and the updated values go to the other replicas
// (an all-gather over the group, each process taking what the replicas
// of its rank updated). The optimizer updates each parameter from its own
// gradient and state only, so the result is that of the unsharded run bit
// for bit.

// zeroOwners assigns each of params to one of replicas: the largest first,
// each to the replica holding the fewest elements so far (the lowest
// index on a tie). Every replica computes the same assignment.
func zeroOwners(params []*optim.Param, replicas int) []int {
	order := make([]int, len(params))
	for i := range order {
		order[i] = i
	}
	size := func(i int) int { return params[i].Value.Size() }
	sort.SliceStable(order, func(a, b int) bool { return size(order[a]) > size(order[b]) })
	load := make([]int, replicas)
	owner := make([]int, len(params))
	for _, i := range order {
		best := 0
		for q := 1; q < replicas; q++ {
			if load[q] < load[best] {
				best = q
			}
		}
		owner[i] = best
		load[best] += size(i)
	}
	return owner
}

// sharded reports whether this Runner shards its optimizer state.
func (r *Runner) sharded() bool {
	return r.cfg.Zero && r.cfg.Replicas > 1 && r.cfg.Group != nil
}

// optimizerParams is what stage s's optimizer steps: all of ps, or with
// ZeRO the parameters this replica owns (recorded for Update).
func (r *Runner) optimizerParams(s int, ps []*optim.Param) []*optim.Param {
	if !r.sharded() {
		return ps
	}
	if r.owned == nil {
		r.owned = map[int][]*optim.Param{}
	}
	var mine []*optim.Param
	for i, o := range zeroOwners(ps, r.cfg.Replicas) {
		if o == r.cfg.Replica {
			mine = append(mine, ps[i])
		}
	}
	r.owned[s] = mine
	return mine
}

// stepParams is what Update gives stage s's optimizer.
func (r *Runner) stepParams(s int) []*optim.Param {
	if r.sharded() {
		return r.owned[s]
	}
	return r.params[s]
}

// ownedNames are the parameters of stage s whose optimizer state this
// process holds.
func (r *Runner) ownedNames(s int) map[string]bool {
	out := map[string]bool{}
	for _, p := range r.stepParams(s) {
		out[p.Name] = true
	}
	return out
}

// syncShards sends the parameters this replica updated to the other
// replicas of its rank, and takes theirs (ZeRO only).
func (r *Runner) syncShards(ctx context.Context) error {
	if !r.sharded() {
		return nil
	}
	mine := map[string]*graph.Tensor{}
	for s, ps := range r.owned {
		for _, p := range ps {
			mine[fmt.Sprintf("%d/%s", s, p.Name)] = p.Value
		}
	}
	blob, err := EncodeTensors(mine)
	if err != nil {
		return err
	}
	parts, err := r.cfg.Group.AllGatherObject(ctx, blob)
	if err != nil {
		return fmt.Errorf("pipeline: rank %d of replica %d: gathering the replicas' updated parameters (ZeRO): %w", r.cfg.Rank, r.cfg.Replica, err)
	}
	ranks := r.Schedule.Ranks
	for proc, part := range parts {
		if proc%ranks != r.cfg.Rank || proc/ranks == r.cfg.Replica {
			continue
		}
		ts, err := DecodeTensors(part)
		if err != nil {
			return fmt.Errorf("pipeline: the parameters of replica %d (ZeRO): %w", proc/ranks, err)
		}
		for s := range r.params {
			if r.Stages[s] == nil {
				continue
			}
			for _, p := range r.params[s] {
				t, ok := ts[fmt.Sprintf("%d/%s", s, p.Name)]
				if !ok {
					continue
				}
				src, dst := t.Float32s(), p.Value.Float32s()
				if src == nil || dst == nil || len(src) != len(dst) {
					return fmt.Errorf("pipeline: stage %d: parameter %s from replica %d (ZeRO): %v %v, want %v %v", s, p.Name, proc/ranks, t.DType, t.Shape, p.Value.DType, p.Value.Shape)
				}
				copy(dst, src)
			}
		}
	}
	return nil
}
