package pipeline

import (
	"context"
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Synchronised BatchNorm with pipelining (--sync-batchnorm): the stage
// graphs are rewritten as one process's are (StageConfig.Rewrite:
// train.SyncBatchNorm, each training-mode BatchNormalization around
// onnxtrain.AllReduceSum nodes), and the stage programs run with a
// collective over the replicas of their rank: the R processes holding the
// same stages. Every replica runs the same action list, so the replicas of
// a rank issue the same sums in the same order; each sum travels over the
// pipeline's transport, every replica sending its operand to the others
// and adding all R operands in replica order (the same float32 sum
// everywhere). Micro-batch m of every replica is normalised with the
// statistics of the R micro-batches m together, as R data-parallel
// processes with --sync-batchnorm normalise their concurrent batches.

// replicaCollective is backend.Collective over the replicas of one rank.
type replicaCollective struct {
	r     *Runner
	raw   Transport // addressed by process index in the group
	seq   int64     // the step
	calls int       // sums issued in the step
}

// collectiveStage marks the collective's messages (no stage is negative).
const collectiveStage = -1

func (c *replicaCollective) WorldSize() int { return c.r.cfg.Replicas }

// AllReduceSum replaces x by its sum over the replicas of this rank.
func (c *replicaCollective) AllReduceSum(ctx context.Context, x []float32) error {
	r := c.r
	S, R, me := r.Schedule.Ranks, r.cfg.Replicas, r.cfg.Replica
	k := MsgKey{Step: c.seq, Kind: Forward, Micro: c.calls, Stage: collectiveStage}
	c.calls++
	mine := graph.FromFloat32(append([]float32(nil), x...), len(x))
	for q := 0; q < R; q++ {
		if q != me {
			if err := c.raw.Send(ctx, q*S+r.cfg.Rank, k, map[string]*graph.Tensor{"x": mine}); err != nil {
				return fmt.Errorf("pipeline: rank %d of replica %d: synchronised BatchNorm: %w", r.cfg.Rank, me, err)
			}
		}
	}
	clear(x)
	for q := 0; q < R; q++ {
		part := mine
		if q != me {
			msg, err := r.recvWithin(ctx, c.raw, q*S+r.cfg.Rank, k)
			if err != nil {
				return fmt.Errorf("pipeline: rank %d of replica %d: synchronised BatchNorm, waiting for replica %d: %w", r.cfg.Rank, me, q, err)
			}
			if part = msg["x"]; part == nil || len(part.Float32s()) != len(x) {
				return fmt.Errorf("pipeline: rank %d: synchronised BatchNorm: replica %d sent %v values, want %d", r.cfg.Rank, q, part, len(x))
			}
		}
		for i, v := range part.Float32s() {
			x[i] += v
		}
	}
	return nil
}

// withReplicaCollective gives the stage programs of step seq the
// collective over this rank's replicas (RunnerConfig.SyncBatchNorm).
func (r *Runner) withReplicaCollective(ctx context.Context, seq int64) context.Context {
	if !r.cfg.SyncBatchNorm || r.cfg.Replicas <= 1 || r.cfg.Transport == nil {
		return ctx
	}
	return backend.WithCollective(ctx, &replicaCollective{r: r, raw: r.rawTransport(), seq: seq})
}
