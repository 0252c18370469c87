package pipeline

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/onnxtrain/onnxtrain/distrib"
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
//
// ZeRO-2 (Zero 2) shards the gradients as well, over the same owners. At
// the end of a step (after its last flush) each replica sends every other
// replica of its rank the summed gradients of the parameters that replica
// owns, and adds what it receives to its own, in replica order, divided by
// the replicas: a reduce-scatter over the stage's data-parallel group,
// over the pipeline's transport, in blocks of whole parameters. Each
// replica then holds the averaged gradient of its own parameters only
// (the others' Grad is nil); the whole-model gradient buffer the
// replicas' all-reduce needs without ZeRO-2 (4 bytes per parameter of
// the whole model, in every process) is never made. Clipping adds the
// squared norms of the gradients each process keeps over the group;
// tied weights (a parameter read by stages of several ranks) are summed
// with one all-reduce over the group and averaged, as without ZeRO-2.
// What stays whole is each stage's gradient sum over its micro-batches
// (the stage program's state, written by its weight-gradient passes).

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
	return r.cfg.Zero > 0 && r.cfg.Replicas > 1 && r.cfg.Group != nil
}

// zero2 reports whether this Runner also shards the gradients (ZeRO-2).
func (r *Runner) zero2() bool { return r.sharded() && r.cfg.Zero >= 2 }

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
// replicas of its rank, and takes theirs (ZeRO only): over the pipeline's
// transport, each replica sending its own parameters to each other
// replica of its rank (an all-gather within the stage's data-parallel
// group, whole parameters as blocks), or without a transport through an
// AllGatherObject over the whole group.
func (r *Runner) syncShards(ctx context.Context) error {
	if !r.sharded() {
		return nil
	}
	if r.cfg.Transport != nil {
		return r.gatherShards(ctx)
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
		if err := r.setParams(ts, proc/ranks); err != nil {
			return err
		}
	}
	return nil
}

// setParams copies the parameters another replica updated (ZeRO), named
// "stage/param" in ts, into this rank's stages; a parameter ts does not
// hold is left as it is.
func (r *Runner) setParams(ts map[string]*graph.Tensor, replica int) error {
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
				return fmt.Errorf("pipeline: stage %d: parameter %s from replica %d (ZeRO): %v %v, want %v %v", s, p.Name, replica, t.DType, t.Shape, p.Value.DType, p.Value.Shape)
			}
			copy(dst, src)
		}
	}
	return nil
}

// zeroStage marks the ZeRO-2 reduce-scatter's messages (collectiveStage,
// -1, marks synchronised BatchNorm's).
const zeroStage = -2

// reduceScatterReplicas is finishReplicated's gradient average under
// ZeRO-2 (after the last flush of a step only): each replica ends with the
// mean over the replicas of the gradients of the parameters it owns.
func (r *Runner) reduceScatterReplicas(ctx context.Context) error {
	if !r.lastFlush() {
		return nil
	}
	S, R, me := r.Schedule.Ranks, r.cfg.Replicas, r.cfg.Replica
	inv := 1 / float32(R)
	if err := r.averageTied(ctx, inv); err != nil {
		return err
	}
	raw := r.rawTransport()
	owners := map[int][]int{}
	out := make([]map[string]*graph.Tensor, R)
	for q := range out {
		out[q] = map[string]*graph.Tensor{}
	}
	for s := range r.params {
		if r.Stages[s] == nil {
			continue
		}
		owners[s] = zeroOwners(r.params[s], R)
		for i, p := range r.params[s] {
			if _, tied := r.Plan.Shared[p.Name]; tied {
				continue
			}
			if o := owners[s][i]; o != me {
				out[o][fmt.Sprintf("%d/%s", s, p.Name)] = r.grads[s][i]
			}
		}
	}
	k := MsgKey{Step: r.seq - 1, Kind: BackwardWeight, Stage: zeroStage}
	for q := 0; q < R; q++ {
		if q == me {
			continue
		}
		if err := raw.Send(ctx, q*S+r.cfg.Rank, k, out[q]); err != nil {
			return fmt.Errorf("pipeline: rank %d of replica %d: reduce-scattering gradients (ZeRO-2) to replica %d: %w", r.cfg.Rank, me, q, err)
		}
	}
	in := make([]map[string]*graph.Tensor, R)
	for q := 0; q < R; q++ {
		if q == me {
			continue
		}
		msg, err := r.recvWithin(ctx, raw, q*S+r.cfg.Rank, k)
		if err != nil {
			return fmt.Errorf("pipeline: rank %d of replica %d: reduce-scattering gradients (ZeRO-2), waiting %v for replica %d: %w", r.cfg.Rank, me, r.cfg.RecvTimeout, q, err)
		}
		in[q] = msg
	}
	defer func() {
		for _, msg := range in {
			recycle(raw, msg)
		}
	}()
	for s := range r.params {
		if r.Stages[s] == nil {
			continue
		}
		for i, p := range r.params[s] {
			_, tied := r.Plan.Shared[p.Name]
			if owners[s][i] != me {
				p.Grad = nil // another replica keeps it
				continue
			}
			p.Grad = r.grads[s][i]
			if tied {
				continue // averaged by averageTied
			}
			// this replica's sum, then the others' in replica order
			// (only the owner adds them: no other process needs the same
			// rounding), in place
			g := p.Grad.Float32s()
			for q := 0; q < R; q++ {
				if q == me {
					continue
				}
				t := in[q][fmt.Sprintf("%d/%s", s, p.Name)]
				if t == nil || len(t.Float32s()) != len(g) {
					return fmt.Errorf("pipeline: stage %d: replica %d sent %v for the gradient of %s (ZeRO-2), want %d float32 values", s, q, t, p.Name, len(g))
				}
				for j, v := range t.Float32s() {
					g[j] += v
				}
			}
			for j := range g {
				g[j] *= inv
			}
		}
	}
	return nil
}

// averageTied replaces the gradient of every tied weight (a parameter of
// several stages) by its sum over the stages and replicas times inv: one
// all-reduce over the group, each process adding its stages' copies (inv
// 1: the sum, for a single replica's stages in several processes).
func (r *Runner) averageTied(ctx context.Context, inv float32) error {
	if len(r.Plan.Shared) == 0 {
		return nil
	}
	names := sortedNames(r.Plan.Shared)
	total := 0
	for _, name := range names {
		total += r.Plan.g.Initializers[name].Size()
	}
	buf := make([]float32, total)
	off := 0
	for _, name := range names {
		for _, s := range r.Plan.Shared[name] {
			if r.Stages[s] == nil {
				continue
			}
			for j, v := range r.grads[s][r.paramIndex(s, name)].Float32s() {
				buf[off+j] += v
			}
		}
		off += r.Plan.g.Initializers[name].Size()
	}
	if err := r.cfg.Group.AllReduce(ctx, buf, distrib.Sum); err != nil {
		return fmt.Errorf("pipeline: rank %d: summing tied weights' gradients: %w", r.cfg.Rank, err)
	}
	off = 0
	for _, name := range names {
		n := r.Plan.g.Initializers[name].Size()
		for _, s := range r.Plan.Shared[name] {
			if r.Stages[s] == nil {
				continue
			}
			g := r.grads[s][r.paramIndex(s, name)].Float32s()
			for j := range g {
				g[j] = buf[off+j] * inv
			}
		}
		off += n
	}
	return nil
}

// clipZero2 is ClipGradNorm under ZeRO-2: every process adds the squared
// norms of the gradients it keeps (a tied weight counted at its first
// stage only), one all-reduce of the sum over the group gives the whole
// gradient's norm, and each process scales what it keeps.
func (r *Runner) clipZero2(ctx context.Context, maxNorm float64) (float64, error) {
	var sq float64
	for s := range r.params {
		for _, p := range r.stepParams(s) {
			if st, ok := r.Plan.Shared[p.Name]; ok && st[0] != s {
				continue
			}
			if p.Grad == nil {
				return 0, fmt.Errorf("pipeline: stage %d: parameter %s has no gradient to clip (ZeRO-2: run ForwardBackward first)", s, p.Name)
			}
			n := paramNorm(p.Grad.Float32s())
			sq += n * n
		}
	}
	buf := []float32{float32(sq)}
	if err := r.cfg.Group.AllReduce(ctx, buf, distrib.Sum); err != nil {
		return 0, fmt.Errorf("pipeline: rank %d: gradient norm (ZeRO-2): %w", r.cfg.Rank, err)
	}
	total := float32(math.Sqrt(float64(buf[0])))
	coef := (1 / (total + float32(1e-6))) * float32(maxNorm)
	if coef < 1 {
		for s := range r.params {
			for _, p := range r.stepParams(s) {
				v := p.Grad.Float32s()
				for i := range v {
					v[i] *= coef
				}
			}
		}
	}
	return float64(total), nil
}

// gatherShards is syncShards over the transport: messages keyed by the
// step, sent only between the replicas of this rank.
func (r *Runner) gatherShards(ctx context.Context) error {
	S, R, me := r.Schedule.Ranks, r.cfg.Replicas, r.cfg.Replica
	raw := r.rawTransport()
	mine := map[string]*graph.Tensor{}
	for s, ps := range r.owned {
		for _, p := range ps {
			mine[fmt.Sprintf("%d/%s", s, p.Name)] = p.Value
		}
	}
	k := MsgKey{Step: r.seq - 1, Kind: Forward, Stage: zeroStage}
	for q := 0; q < R; q++ {
		if q == me {
			continue
		}
		if err := raw.Send(ctx, q*S+r.cfg.Rank, k, mine); err != nil {
			return fmt.Errorf("pipeline: rank %d of replica %d: sending the parameters it updated (ZeRO) to replica %d: %w", r.cfg.Rank, me, q, err)
		}
	}
	for q := 0; q < R; q++ {
		if q == me {
			continue
		}
		ts, err := r.recvWithin(ctx, raw, q*S+r.cfg.Rank, k)
		if err != nil {
			return fmt.Errorf("pipeline: rank %d of replica %d: waiting %v for the parameters replica %d updated (ZeRO): %w", r.cfg.Rank, me, r.cfg.RecvTimeout, q, err)
		}
		if err := r.setParams(ts, q); err != nil {
			return err
		}
		recycle(raw, ts)
	}
	return nil
}

// rawTransport is the transport between processes, under the replica
// adapter of a replicated pipeline (which the exchanges between replicas
// address directly).
func (r *Runner) rawTransport() Transport {
	if rt, ok := r.cfg.Transport.(replicaTransport); ok {
		return rt.Transport
	}
	return r.cfg.Transport
}

// recvWithin receives k from peer over tr, waiting at most RecvTimeout.
func (r *Runner) recvWithin(ctx context.Context, tr Transport, peer int, k MsgKey) (map[string]*graph.Tensor, error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RecvTimeout)
	defer cancel()
	return tr.Recv(rctx, peer, k)
}

// recycle gives a received message's buffers back to a transport that
// reuses them (TCPTransport.Recycle).
func recycle(t Transport, msg map[string]*graph.Tensor) {
	if rc, ok := t.(interface {
		Recycle(map[string]*graph.Tensor)
	}); ok && msg != nil {
		rc.Recycle(msg)
	}
}
