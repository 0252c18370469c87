package train

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// pipelineBuild is what building a pipeline needs, from `train`'s Config
// (runPipeline) or from AcceleratorConfig.Pipeline (PreparePipeline).
type pipelineBuild struct {
	Stages, Micro, Virtual int
	Schedule               string
	SplitAt                []string
	Devices                string // comma-separated; empty: cpu:0..cpu:S-1
	Partition, StageMemory string
	BatchSize              int
	Slots                  int // optimizer state per parameter (0: 2, Adam's)
	Backend                string
	Seed                   int64
	Recompute              bool
	MixedPrecision         string         // "", "no", "bf16" or "fp16"
	Zero                   int            // 1: each stage's optimizer state sharded over its replicas; 2: its gradients too (pipeline/zero.go)
	Eval                   bool           // compile the stages' evaluation programs (--val-data)
	TrainOnly              string         // --train-only (with --freeze folded in): the others are frozen
	SyncBatchNorm          bool           // batch statistics summed over each stage's replicas
	Tuning                 backend.Tuning // passed to every stage compile
	Timeout                time.Duration  // of one receive (0: the group's, or 5 minutes)
	NewOptimizer           func([]*optim.Param) (optim.Optimizer, error)
	// First returns the first micro-batches of the data, for --partition
	// profile (measured on process 0 only).
	First func(context.Context) ([]pipeline.Batch, error)
}

// builtPipeline is a pipeline ready to run: the runner of this process's
// ranks, the plan and the schedule; close releases the transport.
type builtPipeline struct {
	runner *pipeline.Runner
	plan   *pipeline.Plan
	sched  *pipeline.Schedule
	close  func()
}

// buildPipeline cuts m into stages and builds this process's part of the
// pipeline: every rank in one process (group nil), or rank `rank` of
// replica `replica` of `replicas` (process p is rank p mod S of replica p
// div S), activations over TCP to the other processes of its replica.
func buildPipeline(ctx context.Context, pb pipelineBuild, m *graph.Model, lc LossConfig, group *distrib.Group, rank, replicas, replica int) (*builtPipeline, error) {
	name := pb.Schedule
	if name == "" {
		name = "1f1b"
	}
	sched, err := pipeline.New(name, pb.Stages, pb.Micro, pb.Virtual)
	if err != nil {
		return nil, fmt.Errorf("--schedule: %w", err)
	}
	popts := pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: pb.BatchSize, SplitAt: pb.SplitAt, OptimizerSlots: pb.Slots,
		InFlight: func(stage, _ int) int { return sched.InFlight(stage) }}
	if popts.OptimizerSlots == 0 {
		popts.OptimizerSlots = 2
	}
	if popts.TrainOnly, err = TrainOnlyRegexp(pb.TrainOnly); err != nil {
		return nil, err
	}
	if pb.StageMemory != "" {
		if popts.StageMemory, err = pipeline.ParseBytes(pb.StageMemory); err != nil {
			return nil, fmt.Errorf("--stage-memory: %w", err)
		}
	}
	switch pb.MixedPrecision {
	case "", "no":
	case "bf16", "fp16": // fp16: the caller scales the loss (pipeline/amp.go)
	default:
		return nil, fmt.Errorf("--mixed-precision %q: want no, bf16 or fp16", pb.MixedPrecision)
	}
	sc := pipeline.StageConfig{Backend: pb.Backend, Seed: pb.Seed, Recompute: pb.Recompute, Tuning: pb.Tuning, Eval: pb.Eval}
	if pb.MixedPrecision == "bf16" || pb.MixedPrecision == "fp16" {
		// Each stage autocasts its lowered forward graph where train.Build
		// autocasts the whole one; the tensors crossing a cut keep their
		// whole-graph types (pipeline.StageConfig.AutoCast).
		sc.AutoCast = func(g *graph.Graph, opset int64) error { return autoCast(g, opset, pb.MixedPrecision) }
	}
	if lc.Kind == "output" {
		sc.LossOutput = lc.Output
	} else {
		sc.Loss = LossAppender(m, lc)
	}
	if pb.SyncBatchNorm { // pipeline/syncbn.go: summed over the replicas of each rank
		sc.Rewrite = func(g *graph.Graph, opset int64) error { _, err := SyncBatchNorm(g, opset); return err }
	}
	plan, err := partitionFor(ctx, pb, m, popts, sc, group)
	if err != nil {
		return nil, err
	}
	// The plan's activations per stage: what each stage's training graph
	// keeps per micro-batch (recomputation, the loss, the fused weight
	// transposes), rather than the cost model's sum of node outputs.
	sc.SplitBackward = sched.SplitBackward()
	if err := plan.RefineMemory(sc); err != nil {
		return nil, err
	}
	if popts.TrainOnly != nil {
		n := 0
		for _, st := range plan.Stages {
			n += len(st.Params)
		}
		if n == 0 {
			return nil, fmt.Errorf("--train-only %q matches no parameter of the model; nothing would train", pb.TrainOnly)
		}
	}
	var devices []string
	if pb.Devices != "" {
		devices = strings.Split(pb.Devices, ",")
	}
	rc := pipeline.RunnerConfig{Stage: sc, Devices: devices, RecvTimeout: pb.Timeout, Zero: pb.Zero, SyncBatchNorm: pb.SyncBatchNorm}
	if pb.NewOptimizer != nil {
		rc.NewOptimizer = func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return pb.NewOptimizer(ps) }
	}
	closeFn := func() {}
	if group != nil {
		if rc.RecvTimeout <= 0 {
			rc.RecvTimeout = group.Timeout()
		}
		// Listen on ONNXTRAIN_LISTEN_HOST, else on the address this machine
		// reaches the master from (so that the others can dial it);
		// loopback on one machine.
		host := os.Getenv("ONNXTRAIN_LISTEN_HOST") // as distrib's peer listener
		if a := os.Getenv("MASTER_ADDR"); host == "" && a != "" && !isLoopback(a) {
			if c, err := net.Dial("udp", net.JoinHostPort(a, "9")); err == nil { // sends nothing
				host = c.LocalAddr().(*net.UDPAddr).IP.String()
				c.Close()
			}
		}
		tr, err := pipeline.NewTCPTransport(ctx, group, host, rc.RecvTimeout)
		if err != nil {
			return nil, err
		}
		closeFn = func() { tr.Close() }
		rc.Transport, rc.Rank, rc.Group = pipeline.ReplicaTransport(tr, replica*pb.Stages), rank, group
		rc.Replicas, rc.Replica = replicas, replica
		if len(devices) == 0 {
			for r := 0; r < pb.Stages; r++ {
				rc.Devices = append(rc.Devices, fmt.Sprintf("cpu:0@rank%d", r))
			}
		}
	}
	runner, err := pipeline.NewRunner(plan, sched, rc)
	if err != nil {
		closeFn()
		return nil, err
	}
	// Each process keeps only its stages' parameters (the stages hold
	// their own copies; the loaded model's other tensors can go).
	runner.ReleaseOtherStages()
	if group != nil {
		// Nothing of this process aliases the model file's mapping any
		// more: the pages it read while loading and cutting need not stay
		// in its resident memory.
		importer.DropPages(m)
	}
	debug.FreeOSMemory()
	return &builtPipeline{runner: runner, plan: plan, sched: sched, close: closeFn}, nil
}

// partitionFor cuts the model: by the cost model (--partition estimate)
// or by measuring its pieces on the first micro-batches (--partition
// profile; across processes, process 0 measures and sends the measured
// node costs to the others, so that every process cuts alike).
func partitionFor(ctx context.Context, pb pipelineBuild, m *graph.Model, popts pipeline.PartitionOptions, sc pipeline.StageConfig, group *distrib.Group) (*pipeline.Plan, error) {
	switch pb.Partition {
	case "", "estimate":
		return pipeline.Partition(m, popts)
	case "profile":
	default:
		return nil, fmt.Errorf("--partition must be estimate or profile, got %q", pb.Partition)
	}
	if pb.First == nil {
		return nil, fmt.Errorf("--partition profile needs the data's first micro-batches")
	}
	var secs map[string]float64
	if group == nil || group.Rank() == 0 {
		micro, err := pb.First(ctx)
		if err != nil {
			return nil, err
		}
		plan, err := pipeline.ProfilePartition(ctx, m, popts, sc, micro, 3)
		if err != nil {
			return nil, err
		}
		secs = plan.NodeSeconds()
	}
	if group != nil {
		b, err := json.Marshal(secs)
		if err != nil {
			return nil, err
		}
		if b, err = group.BroadcastObject(ctx, b, 0); err != nil {
			return nil, fmt.Errorf("--partition profile: receiving process 0's measurements: %w", err)
		}
		if err := json.Unmarshal(b, &secs); err != nil {
			return nil, fmt.Errorf("--partition profile: %w", err)
		}
	}
	popts.NodeSeconds = secs
	return pipeline.Partition(m, popts)
}
