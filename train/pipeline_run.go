package train

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
	"github.com/onnxtrain/onnxtrain/train/track"
)

// Pipelined reports whether the configuration asks for pipeline
// parallelism (--pipeline-stages).
func (c *Config) Pipelined() bool { return c.PipelineStages > 0 }

// microBatches is the number of micro-batches of one pipelined step:
// --micro-batches, else --grad-accum.
func (c *Config) microBatches() int {
	if c.MicroBatches > 0 {
		return c.MicroBatches
	}
	return c.GradAccum
}

// pipelineFlushes is the number of runs of the schedule (of
// microBatches() micro-batches each) in one optimizer step: --grad-accum
// when --micro-batches is given, else 1.
func (c *Config) pipelineFlushes() int {
	if c.MicroBatches > 0 && c.GradAccum > 1 {
		return c.GradAccum
	}
	return 1
}

// checkPipeline rejects what the in-process pipeline does not do yet.
func (c *Config) checkPipeline() error {
	switch {
	case c.MicroBatches < 0:
		return fmt.Errorf("--micro-batches must be positive, got %d", c.MicroBatches)
	}
	return nil
}

// runPipeline is `onnxtrain train --pipeline-stages S`: the model cut into
// stages (pipeline.Partition), run in this process on a schedule with one
// goroutine per device, each stage owning its parameters, gradients and
// optimizer state. It logs, checkpoints and writes --output as Run does;
// checkpoints hold the model under its ONNX names, so they resume with
// another stage count or without pipelining, and the reverse.
func runPipeline(ctx context.Context, cfg Config, onRestart bool, out, msg io.Writer) (*Summary, error) {
	if err := cfg.checkPipeline(); err != nil {
		return nil, err
	}
	start := time.Now()
	// Under a launcher, each process is one rank of the pipeline.
	group, err := joinGroup(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// Process p is rank p mod S of pipeline replica p div S.
	rank, replicas, replica := 0, 1, 0
	mainProcess := group == nil || group.Rank() == 0 // logs, writes checkpoints and --output
	if group != nil {
		defer group.Close()
		if group.WorldSize()%cfg.PipelineStages != 0 {
			return nil, fmt.Errorf("--pipeline-stages %d over %d processes: the processes must be a multiple of the stages (process p is rank p mod S of replica p div S)", cfg.PipelineStages, group.WorldSize())
		}
		replicas = group.WorldSize() / cfg.PipelineStages
		rank, replica = group.Rank()%cfg.PipelineStages, group.Rank()/cfg.PipelineStages
		if group.Rank() != 0 {
			out, msg = io.Discard, io.Discard
		}
	}
	// --output: refuse another run's folder, lock it, check it is
	// writable, before anything is loaded, as one process does
	// (outputdir.go); every process learns whether the main one refused.
	releaseOutput, err := prepareOutput(cfg, onRestart, mainProcess, msg)
	if group != nil && group.WorldSize() > 1 && cfg.Output != "" {
		flag := []float32{0}
		if err != nil {
			flag[0] = 1
		}
		if rerr := group.AllReduce(ctx, flag, distrib.Sum); rerr != nil {
			err = errors.Join(err, rerr)
		} else if err == nil && flag[0] > 0 {
			err = fmt.Errorf("--output %s: the main process refused it (its error says why)", cfg.Output)
		}
	}
	if err != nil {
		return nil, err
	}
	defer releaseOutput()
	m, err := importer.Load(cfg.Model)
	if err != nil {
		return nil, err
	}
	// --num-classes, --freeze, --freeze-bn and a fixed-batch export, as
	// one process prepares them (finetune.go); --train-only and --freeze
	// reach the partitioner as one pattern.
	ft, err := PrepareFineTune(m, cfg)
	if err != nil {
		return nil, err
	}
	for _, note := range ft.Notes {
		fmt.Fprintln(msg, note)
	}
	lc, err := ParseLoss(cfg.Loss)
	if err != nil {
		return nil, err
	}
	lc.LabelSmoothing = cfg.LabelSmoothing
	lc.IgnoreIndex = cfg.IgnoreIndex
	M := cfg.microBatches()
	// The data: the graph inputs, and labels for a loss outside the graph.
	var inputs []string
	for _, in := range m.Graph.Inputs {
		if _, isInit := m.Graph.Initializers[in.Name]; !isInit {
			inputs = append(inputs, in.Name)
		}
	}
	ds, err := OpenData(cfg, cfg.Data, true, &Program{Model: m, DataInputs: inputs, NeedsLabels: lc.Kind != "output"})
	if err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: cfg.BatchSize, Shuffle: cfg.Shuffle, DropLast: cfg.DropLast, Seed: uint64(cfg.Seed), Prefetch: 2})
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", cfg.Data, err)
	}
	var val *data.Loader // --val-data: pipeline_eval.go
	if cfg.ValData != "" {
		vds, err := OpenData(cfg, cfg.ValData, false, &Program{Model: m, DataInputs: inputs, NeedsLabels: lc.Kind != "output"})
		if err != nil {
			return nil, err
		}
		if val, err = data.NewLoader(vds, data.LoaderConfig{BatchSize: cfg.BatchSize, Prefetch: 2}); err != nil {
			return nil, fmt.Errorf("data: %s: %w", cfg.ValData, err)
		}
	}
	if loader.Len() == 0 {
		return nil, fmt.Errorf("data: %s: %d examples make no batch of %d (with --drop-last)", cfg.Data, ds.Len(), cfg.BatchSize)
	}
	pb := pipelineBuild{Stages: cfg.PipelineStages, Micro: M, Schedule: cfg.Schedule, Virtual: cfg.VirtualStages,
		Devices: cfg.Devices, Partition: cfg.Partition, StageMemory: cfg.StageMemory, BatchSize: cfg.BatchSize,
		Backend: cfg.Backend, Seed: cfg.Seed, Recompute: cfg.Recompute, Timeout: cfg.DistTimeout, MixedPrecision: cfg.MixedPrecision, Tuning: cfg.Tuning,
		Zero: cfg.Zero, Eval: cfg.ValData != "", TrainOnly: ft.TrainOnly, SyncBatchNorm: cfg.SyncBatchNorm,
		NewOptimizer: func(ps []*optim.Param) (optim.Optimizer, error) { return NewOptimizer(cfg, ps) },
		First:        func(ctx context.Context) ([]pipeline.Batch, error) { return firstMicroBatches(ctx, loader, M) }}
	if cfg.SplitAt != "" {
		pb.SplitAt = strings.Split(cfg.SplitAt, ",")
	}
	if cfg.Optimizer == "sgd" {
		pb.Slots = 1
	}
	built, err := buildPipeline(ctx, pb, m, lc, group, rank, replicas, replica)
	if err != nil {
		return nil, err
	}
	defer built.close()
	runner, plan, sched := built.runner, built.plan, built.sched
	// fp16: one loss scale for every stage, one inf/NaN flag agreed by all
	// (pipeline/amp.go), so that every stage skips the same steps.
	var scaler *GradScaler
	if cfg.MixedPrecision == "fp16" {
		if scaler, err = NewGradScaler(DefaultGradScalerConfig()); err != nil {
			return nil, err
		}
	}
	K := cfg.pipelineFlushes()
	W := K * M // batches of one replica in one optimizer step
	total := TotalSteps(cfg.Steps, cfg.Epochs, loader.Len(), W*replicas)
	lrs, err := NewSchedule(cfg, total)
	if err != nil {
		return nil, err
	}
	step, startEpoch, skip, counter := 0, 0, 0, 0
	// --save-best and --early-stopping-patience (control.go): the best
	// evaluation, the evaluations since, carried by checkpoints as "run",
	// with the data-order settings of the one-process run this one
	// equals (--grad-accum R×K×M in one process), so that a resume in
	// another layout compares like with like.
	control := &runControl{BatchSize: cfg.BatchSize, GradAccum: W * replicas, World: 1, Seed: cfg.Seed, Shuffle: cfg.Shuffle}
	if cfg.Resume != "" {
		dir := cfg.Resume
		if dir == "latest" {
			if dir, err = Latest(cfg.Output); errors.Is(err, ErrNoCheckpoint) {
				dir = ""
			} else if err != nil {
				return nil, fmt.Errorf("--resume latest: %w", err)
			}
		}
		if dir != "" {
			st, err := LoadState(dir)
			if err != nil {
				return nil, fmt.Errorf("--resume: %w", err)
			}
			if err := runner.LoadWeights(st.Params, st.Buffers); err != nil {
				return nil, fmt.Errorf("--resume %s: %w", dir, err)
			}
			if err := runner.LoadOptimizerState(st.Optimizer); err != nil {
				return nil, fmt.Errorf("--resume %s: %w", dir, err)
			}
			if scaler != nil {
				if err := scaler.LoadState(st.LossScaler); err != nil {
					return nil, fmt.Errorf("--resume %s: %w", dir, err)
				}
			}
			if b, ok := st.Extra["run"]; ok {
				if err := control.LoadStateDict(b); err != nil {
					return nil, fmt.Errorf("--resume %s: %w", dir, err)
				}
			}
			step, counter = st.Step, st.CheckpointCounter
			startEpoch, skip = Position{Epoch: st.Epoch, BatchInEpoch: st.BatchInEpoch}.ResumePoint(loader.Len())
			if cfg.LogFormat != "json" {
				fmt.Fprintf(msg, "resumed from %s at step %d (epoch %d, batch %d)\n", dir, step, startEpoch, skip)
			}
		}
	}
	runner.SetLR(lrs.LR(step))
	if cfg.LogFormat != "json" {
		fmt.Fprintf(msg, "training %s in %d pipeline stages on %s (schedule %s, %d micro-batches of %d per step, %d replicas), %d optimizer steps\n",
			cfg.Model, len(plan.Stages), deviceList(runner), sched.Name, M, cfg.BatchSize, replicas, total)
	}
	enc := json.NewEncoder(out)
	epochs := cfg.Epochs
	if cfg.Steps > 0 {
		epochs = math.MaxInt32
	}
	sum := &Summary{}
	save := func(epoch, batchInEpoch int) error {
		counter++
		params, buffers, optState, err := gatherStages(ctx, group, runner)
		if err != nil || !mainProcess {
			return err
		}
		run, err := control.StateDict()
		if err != nil {
			return err
		}
		st := &State{Step: step, Epoch: epoch, BatchInEpoch: batchInEpoch, Params: params, Buffers: buffers,
			Optimizer: optState, Schedule: map[string]any{"step": step, "lr": lrs.LR(step)},
			RNG:               map[string][]byte{"data_seed": binary.LittleEndian.AppendUint64(nil, uint64(cfg.Seed))},
			CheckpointCounter: counter, Extra: map[string]json.RawMessage{"run": run}, LossScaler: scalerState(scaler),
			Versions: map[string]string{"pipeline": fmt.Sprintf("%d stages, %s", len(plan.Stages), sched.Name)}}
		if err := SaveState(filepath.Join(cfg.Output, CheckpointName(step)), st); err != nil { // named by optimizer step, as train.Run names them
			return err
		}
		if cfg.KeepLast > 0 {
			best := ""
			if cfg.SaveBest != "" && control.Best != nil {
				best = control.Best.Checkpoint // spared by pruning
			}
			return PruneKeeping(cfg.Output, cfg.KeepLast, best)
		}
		return nil
	}
	// validate runs the pipelined validation pass, logs it and tracks the
	// best metric (the same record on every process, so all of them
	// agree on saving and stopping).
	validate := func(epoch int) (improved, stop bool, err error) {
		ev, err := evaluatePipeline(ctx, runner, val, group, lc, replicas, replica, epoch, step)
		if err != nil {
			return false, false, err
		}
		sum.LastEval = &ev
		if err := logEval(out, cfg, ev); err != nil {
			return false, false, err
		}
		return control.observe(cfg, ev, msg)
	}
	stopped := false // early stopping
	var replan zeroBubbleReplan
	for epoch := startEpoch; epoch < epochs && !(cfg.Steps > 0 && step >= cfg.Steps) && !stopped; epoch++ {
		var window []pipeline.Batch
		samples := 0
		started := time.Now()
		index := skip
		for b, err := range loader.Epoch(ctx, epoch, skip) {
			if err != nil {
				return sum, err
			}
			index++
			window = append(window, pipeline.Batch{Inputs: b.Inputs, Labels: b.Labels})
			samples += b.Size
			if len(window) < W*replicas && index < loader.Len() {
				continue
			}
			mine := window
			if replicas > 1 {
				if len(window) < W*replicas {
					return sum, fmt.Errorf("step %d, epoch %d: the epoch ends with %d batches, fewer than the %d replicas × %d micro-batches of a step (make the batches per epoch a multiple, or use --steps)", step+1, epoch, len(window), replicas, W)
				}
				mine = window[replica*W : (replica+1)*W]
			}
			// --grad-accum K with --micro-batches M: K runs of the schedule
			// (flushes), their gradients summed, make one step.
			if scaler != nil {
				runner.SetLossScale(scaler.Scale())
			}
			stats, err := runFlushes(ctx, runner, mine, M, K)
			if err != nil {
				return sum, fmt.Errorf("step %d, epoch %d: %w", step+1, epoch, err)
			}
			if math.IsNaN(stats.Loss) || math.IsInf(stats.Loss, 0) {
				return sum, fmt.Errorf("train: step %d (epoch %d): %w (%v); try a lower --lr, --clip-grad-norm, or check the data for NaNs", step+1, epoch, ErrNaNLoss, stats.Loss)
			}
			skipped := false
			if scaler != nil {
				if skipped, err = scaler.unscaleWith(func(inv float32) (bool, error) { return runner.UnscaleGrads(ctx, inv) }); err != nil {
					return sum, err
				}
			}
			norm, err := runner.ClipGradNorm(cfg.ClipGradNorm)
			if err != nil {
				return sum, err
			}
			if cfg.ClipGradValue > 0 {
				if err := runner.ClipGradValue(cfg.ClipGradValue); err != nil {
					return sum, err
				}
			}
			lr := lrs.LR(step)
			if !skipped {
				if err := runner.UpdateContext(ctx); err != nil {
					return sum, err
				}
			}
			step++
			runner.SetLR(lrs.LR(step))
			if err := replan.afterStep(ctx, runner, func(f string, a ...any) { fmt.Fprintf(msg, f+"\n", a...) }); err != nil {
				return sum, fmt.Errorf("step %d, epoch %d: %w", step, epoch, err)
			}
			rec := StepRecord{Step: step, Epoch: epoch, Loss: stats.Loss, LR: lr, GradNorm: norm, Samples: samples,
				SamplesPerS: float64(samples) / time.Since(started).Seconds()}
			if scaler != nil {
				scaler.Update()
				rec.LossScale, rec.Skipped = scaler.Scale(), skipped
				if skipped {
					rec.GradNorm = 0 // inf or NaN, which JSON cannot carry
					sum.SkippedSteps++
					if cfg.LogFormat != "json" {
						fmt.Fprintf(msg, "step %d: gradients hold inf/NaN; step skipped, loss scale now %g\n", rec.Step, rec.LossScale)
					}
				}
			}
			sum.Records = append(sum.Records, rec)
			if cfg.LogFormat == "json" {
				enc.Encode(rec)
			} else {
				fmt.Fprintf(out, "step %d/%d  epoch %d  loss %.5f  lr %.3g  grad_norm %.4g  %s samples/s\n",
					rec.Step, total, rec.Epoch, rec.Loss, rec.LR, rec.GradNorm, track.FormatRate(rec.SamplesPerS))
			}
			window, samples, started = window[:0], 0, time.Now()
			improved := false
			if val != nil && cfg.EvalEvery > 0 && step%cfg.EvalEvery == 0 {
				if improved, stopped, err = validate(epoch); err != nil {
					return sum, fmt.Errorf("step %d: validation: %w", step, err)
				}
			}
			every := cfg.CheckpointEvery
			if cfg.Output != "" && ((every > 0 && step%every == 0) || (improved && cfg.SaveBest != "")) {
				if err := save(epoch, index); err != nil {
					return sum, err
				}
			}
			if stopped || (cfg.Steps > 0 && step >= cfg.Steps) {
				break
			}
		}
		skip = 0
		if val != nil && cfg.EvalEvery == 0 && !stopped {
			improved := false
			if improved, stopped, err = validate(epoch); err != nil {
				return sum, fmt.Errorf("epoch %d: validation: %w", epoch, err)
			}
			if improved && cfg.SaveBest != "" && cfg.Output != "" {
				if err := save(epoch, loader.Len()); err != nil {
					return sum, err
				}
			}
		}
	}
	if control.Best != nil && cfg.SaveBest != "" {
		sum.Best = control.Best
		fmt.Fprintf(msg, "best %s %.6g at step %d: %s\n", control.Best.Metric, control.Best.Value, control.Best.Step, filepath.Join(cfg.Output, control.Best.Checkpoint))
	}
	sum.Steps = step
	if n := len(sum.Records); n > 0 {
		sum.FinalLoss = sum.Records[n-1].Loss
	}
	if cfg.Output != "" {
		// The whole model, under its ONNX names, from the stages.
		params, buffers, _, err := gatherStages(ctx, group, runner)
		if err != nil {
			return sum, err
		}
		if !mainProcess {
			sum.Seconds = time.Since(start).Seconds()
			return sum, nil
		}
		prog := &Program{Model: m, Buffers: map[string]*graph.Tensor{}}
		for name, t := range params {
			dst := m.Graph.Initializers[name]
			if dst.Data == nil { // released (ReleaseOtherStages): take the gathered tensor
				m.Graph.Initializers[name], dst = t, t
			}
			copyInto(dst, t)
			prog.Params = append(prog.Params, &Parameter{Name: name, Value: dst})
		}
		for name, t := range buffers {
			dst := m.Graph.Initializers[name]
			if dst.Data == nil {
				m.Graph.Initializers[name], dst = t, t
			}
			copyInto(dst, t)
			prog.Buffers[name] = dst
		}
		if err := restoreFrozen(m, cfg); err != nil {
			return sum, err
		}
		paths, err := SaveModel(cfg.Output, prog)
		if err != nil {
			return sum, err
		}
		sum.Outputs = paths
		if cfg.LogFormat != "json" {
			fmt.Fprintf(msg, "wrote %v\n", paths)
		}
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// gatherStages collects the whole model's parameters, buffers and
// optimizer state from the ranks' stages onto rank 0 (nil maps elsewhere);
// in one process it reads them from the runner.
func gatherStages(ctx context.Context, g *distrib.Group, r *pipeline.Runner) (params, buffers, opt map[string]*graph.Tensor, err error) {
	p, b := r.Weights()
	o := r.OptimizerState()
	if g == nil {
		return p, b, o, nil
	}
	all := map[string]*graph.Tensor{}
	for k, t := range p {
		all["p:"+k] = t
	}
	for k, t := range b {
		all["b:"+k] = t
	}
	for k, t := range o {
		all["o:"+k] = t
	}
	blob, err := pipeline.EncodeTensors(all)
	if err != nil {
		return nil, nil, nil, err
	}
	parts, err := g.GatherObject(ctx, blob, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pipeline: gathering the stages' weights on rank 0: %w", err)
	}
	if g.Rank() != 0 {
		return nil, nil, nil, nil
	}
	params, buffers, opt = map[string]*graph.Tensor{}, map[string]*graph.Tensor{}, map[string]*graph.Tensor{}
	for i, part := range parts {
		ts, err := pipeline.DecodeTensors(part)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("pipeline: the weights of rank %d: %w", i, err)
		}
		for k, t := range ts {
			dst := map[string]map[string]*graph.Tensor{"p:": params, "b:": buffers, "o:": opt}[k[:2]]
			if dst == nil {
				continue
			}
			if _, ok := dst[k[2:]]; !ok {
				dst[k[2:]] = t
			}
		}
	}
	return params, buffers, opt, nil
}

// firstMicroBatches are the first M micro-batches of epoch 0 (for
// --partition profile).
func firstMicroBatches(ctx context.Context, loader *data.Loader, M int) ([]pipeline.Batch, error) {
	var micro []pipeline.Batch
	for b, err := range loader.Epoch(ctx, 0, 0) {
		if err != nil {
			return nil, err
		}
		micro = append(micro, pipeline.Batch{Inputs: b.Inputs, Labels: b.Labels})
		if len(micro) == M {
			break
		}
	}
	return micro, nil
}

// scalerState is the loss scaler's checkpoint entry (nil without fp16).
func scalerState(s *GradScaler) map[string]float64 {
	if s == nil {
		return nil
	}
	return s.State()
}

// deviceList names the runner's devices for the log, each with its worker
// count where it has its own pool ("cpu:0=1,cpu:1=1", the --devices
// syntax).
func deviceList(r *pipeline.Runner) string {
	out := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		out[i] = d
		if i < len(r.Workers) && r.Workers[i] > 0 {
			out[i] = fmt.Sprintf("%s=%d", d, r.Workers[i])
		}
	}
	return strings.Join(out, ",")
}

// restoreFrozen puts back the tensors ReleaseOtherStages left as
// placeholders that no stage's weights returned: the frozen parameters
// (--train-only, --freeze), read again from the model file and prepared
// as the run prepared it (PrepareFineTune is seeded, so a new head comes
// back as it was).
func restoreFrozen(m *graph.Model, cfg Config) error {
	var missing []string
	for name, t := range m.Graph.Initializers {
		if t != nil && t.Data == nil {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	again, err := importer.Load(cfg.Model)
	if err != nil {
		return fmt.Errorf("--output: reading the frozen parameters again: %w", err)
	}
	if _, err := PrepareFineTune(again, cfg); err != nil {
		return fmt.Errorf("--output: reading the frozen parameters again: %w", err)
	}
	for _, name := range missing {
		t := again.Graph.Initializers[name]
		if t == nil || t.Data == nil || !graph.SameShape(t.Shape, m.Graph.Initializers[name].Shape) {
			return fmt.Errorf("--output: %s holds no tensor %q of shape %v to write back", cfg.Model, name, m.Graph.Initializers[name].Shape)
		}
		m.Graph.Initializers[name] = t
	}
	return nil
}

// runFlushes runs one optimizer step's micro-batches as runs of the
// schedule of m micro-batches each, of flushes runs a step (--grad-accum
// with --micro-batches), their gradients summed: the step's stats, its
// loss the mean over all the micro-batches.
func runFlushes(ctx context.Context, runner *pipeline.Runner, micro []pipeline.Batch, m, flushes int) (pipeline.StepStats, error) {
	var stats pipeline.StepStats
	for k := 0; k*m < len(micro); k++ {
		chunk := micro[k*m : min((k+1)*m, len(micro))]
		runner.SetFlush(k == 0, (k+1)*m >= len(micro), flushes)
		if err := runner.ForwardBackwardPartial(ctx, chunk); err != nil {
			return stats, err
		}
		st := runner.LastStats()
		if k == 0 {
			stats = st
			stats.Loss *= float64(len(chunk))
		} else {
			stats.Loss += st.Loss * float64(len(chunk))
			stats.Losses = append(stats.Losses, st.Losses...)
		}
	}
	stats.Loss /= float64(len(micro))
	return stats, nil
}
