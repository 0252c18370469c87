package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/track"
)

// Summary is what a finished run reports.
type Summary struct {
	Steps     int         `json:"steps"`
	FinalLoss float64     `json:"final_loss"`
	LastEval  *EvalRecord `json:"last_eval,omitempty"`
	// Best is the best evaluation of --save-best and its checkpoint.
	Best    *BestRecord  `json:"best,omitempty"`
	Records []StepRecord `json:"-"`
	Seconds float64      `json:"seconds"`
	Outputs []string     `json:"outputs,omitempty"`
	// SkippedSteps counts fp16 steps skipped for inf/NaN gradients.
	SkippedSteps int `json:"skipped_steps,omitempty"`
}

// Run is `onnxtrain train`, written on the Accelerator API: it loads the
// model and data the config names, trains, evaluates, and writes the
// trained model. Step records go to out (JSON lines with LogFormat "json",
// text otherwise); messages for people go to msg.
func Run(ctx context.Context, cfg Config, out, msg io.Writer) (*Summary, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	onRestart := autoResume(&cfg, msg) // restart.go
	if cfg.Pipelined() {
		return runPipeline(ctx, cfg, onRestart, out, msg) // pipeline_run.go
	}
	start := time.Now()
	r := &runner{cfg: cfg, out: out, msg: msg}
	m, err := r.openModel()
	if err != nil {
		return nil, err
	}
	group, err := joinGroup(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if group != nil {
		defer group.Close()
	}
	if err := r.startAccelerator(group); err != nil {
		return nil, err
	}
	// --output: refuse another run's folder, lock it, check it is
	// writable, all before the first step (outputdir.go).
	releaseOutput, err := prepareOutput(r.cfg, onRestart, r.acc.IsMainProcess(), r.msg)
	if err = agreeOnOutput(ctx, r.acc, r.cfg, err); err != nil { // outputdir.go
		return nil, err
	}
	defer releaseOutput()
	if err := r.prepareModel(m); err != nil {
		return nil, err
	}
	if err := r.prepareData(ctx); err != nil {
		return nil, err
	}
	if err := r.prepareScheduler(); err != nil {
		return nil, err
	}
	if err := r.openLogs(); err != nil {
		return nil, err
	}
	defer r.trackers.Close()
	startEpoch, err := r.resume()
	if err != nil {
		return nil, err
	}
	if err := r.trainEpochs(ctx, startEpoch); err != nil {
		return r.sum, err
	}
	return r.finish(start)
}

// runner holds what the steps of Run share.
type runner struct {
	cfg      Config
	out, msg io.Writer
	ft       *fineTune
	loss     LossConfig
	acc      *Accelerator
	model    *Model
	opt      *Optimizer
	sched    *Scheduler
	trainDS  data.Dataset
	loader   *DataLoader
	val      *DataLoader
	total    int
	trackers track.Tracker
	control  *runControl
	sum      *Summary
	logErr   error // the first failed write of the log: the run fails
	onStep   func(StepRecord)
	onEval   func(EvalRecord)
}

// openModel loads the model, prepares it for fine-tuning and reads the loss.
func (r *runner) openModel() (*graph.Model, error) {
	cfg := r.cfg
	m, err := importer.Load(cfg.Model)
	if err != nil {
		return nil, err
	}
	ft, err := PrepareFineTune(m, cfg) // finetune.go: --num-classes, --freeze, --freeze-bn, fixed batch
	if err != nil {
		return nil, err
	}
	loss, err := ParseLoss(cfg.Loss)
	if err != nil {
		return nil, err
	}
	loss.LabelSmoothing = cfg.LabelSmoothing
	loss.IgnoreIndex = cfg.IgnoreIndex
	r.ft, r.loss = ft, loss
	return m, nil
}

// fusedStepFits reports whether the run's recipe lets each optimizer step
// be one Run with the update inside it (AcceleratorConfig.FusedStep): one
// micro-batch per step, one process, no ZeRO, and --separate-update not
// given.
func fusedStepFits(cfg Config, group *distrib.Group) bool {
	return !cfg.SeparateUpdate && cfg.GradAccum <= 1 &&
		(group == nil || group.WorldSize() == 1) && cfg.Zero == 0
}

// startAccelerator creates the Accelerator on group and quiets the processes other than the main one.
func (r *runner) startAccelerator(group *distrib.Group) error {
	cfg := r.cfg
	acc, err := NewAccelerator(AcceleratorConfig{GradAccum: cfg.GradAccum, Backend: cfg.Backend, Seed: cfg.Seed, Group: group, CompressBF16: cfg.CompressBF16,
		SyncBatchNorm: cfg.SyncBatchNorm, MixedPrecision: cfg.MixedPrecision, Recompute: cfg.Recompute, Zero: cfg.Zero,
		BucketBytes: int(cfg.BucketMB * (1 << 20)), NoOverlap: cfg.NoOverlap,
		FusedStep: fusedStepFits(cfg, group), ClipGradNorm: cfg.ClipGradNorm, ClipGradValue: cfg.ClipGradValue})
	if err != nil {
		return err
	}
	acc.cfg.PrimitivesOnly = cfg.PrimitivesOnly
	acc.cfg.Tuning = cfg.Tuning
	acc.cfg.NoPushDownGather = cfg.NoPushDownGather
	r.acc = acc
	if !acc.IsMainProcess() {
		// Only the main process logs and writes; the others train quietly.
		r.out, r.msg = io.Discard, io.Discard
		r.cfg.LogDir, r.cfg.MetricsAddr = "", ""
	}
	return nil
}

// prepareModel checks the image size, builds the model on the Accelerator and makes its optimizer.
func (r *runner) prepareModel(m *graph.Model) error {
	cfg, acc, ft := r.cfg, r.acc, r.ft
	if err := checkImageSizeFits(cfg); err != nil { // memcheck.go
		return err
	}
	for _, note := range ft.Notes {
		fmt.Fprintln(r.msg, note)
	}
	model, err := acc.PrepareModel(m, r.loss, ModelOptions{TrainOnly: ft.TrainOnly})
	if err != nil {
		return err
	}
	acc.RegisterForCheckpointing(FineTuneStateKey, ft)
	inner, err := NewOptimizer(cfg, model.Params())
	if err != nil {
		return err
	}
	r.model = model
	r.opt = acc.PrepareOptimizer(inner, model)
	return nil
}

// prepareData opens and checks the training and validation data and their loaders.
func (r *runner) prepareData(ctx context.Context) error {
	cfg, acc, model := r.cfg, r.acc, r.model
	trainDS, err := OpenData(cfg, cfg.Data, true, model.Prog)
	if err != nil {
		return err
	}
	if err := checkBatchFits(cfg, trainDS); err != nil { // memcheck.go
		return err
	}
	if err := checkStepFits(ctx, cfg, r.loss, trainDS, model); err != nil { // memcheck.go
		return err
	}
	r.trainDS = trainDS
	r.ft.setData(trainDS) // finetune.go: class names for checkpoints
	loader, err := acc.PrepareDataLoader(trainDS, data.LoaderConfig{BatchSize: cfg.BatchSize, Shuffle: cfg.Shuffle, DropLast: cfg.DropLast, Seed: uint64(cfg.Seed), Prefetch: 2})
	if err != nil {
		return fmt.Errorf("data: %s: %w", cfg.Data, err)
	}
	if loader.Len() == 0 {
		return fmt.Errorf("data: %s: %d examples make no batch of %d (with --drop-last)", cfg.Data, trainDS.Len(), cfg.BatchSize)
	}
	r.loader = loader
	if cfg.ValData != "" {
		valDS, err := OpenData(cfg, cfg.ValData, false, model.Prog)
		if err != nil {
			return err
		}
		if r.val, err = acc.PrepareDataLoader(valDS, data.LoaderConfig{BatchSize: cfg.BatchSize, Prefetch: 2}); err != nil {
			return fmt.Errorf("data: %s: %w", cfg.ValData, err)
		}
		if err := checkValData(ctx, cfg, model, trainDS, valDS); err != nil { // validate.go
			return err
		}
	}
	return nil
}

// prepareScheduler counts the optimizer steps and makes the learning-rate scheduler.
func (r *runner) prepareScheduler() error {
	r.total = TotalSteps(r.cfg.Steps, r.cfg.Epochs, r.loader.Len(), r.cfg.GradAccum)
	schedule, err := NewSchedule(r.cfg, r.total)
	if err != nil {
		return err
	}
	r.sched = r.acc.PrepareScheduler(schedule, r.opt)
	return nil
}

// openLogs opens the trackers, makes the step and evaluation callbacks and prints the run's first line.
func (r *runner) openLogs() error {
	cfg, out, msg, total := r.cfg, r.out, r.msg, r.total
	r.trackers = track.Nop()
	if r.acc.IsMainProcess() {
		var err error
		if r.trackers, err = openTrackers(cfg, out, total); err != nil {
			return err
		}
	}
	trackers := r.trackers
	progress := cfg.LogFormat != "json" && track.IsTerminal(out)
	sum := &Summary{}
	r.sum = sum
	writeJSON := func(v any) {
		if err := writeJSONLine(out, v); err != nil && r.logErr == nil { // jsonlog.go
			r.logErr = fmt.Errorf("writing the JSON log: %w", err)
		}
	}
	every := logEvery(cfg, total)
	r.onStep = func(rec StepRecord) {
		sum.Records = append(sum.Records, rec)
		trackers.Step(track.Record{Step: rec.Step, Epoch: rec.Epoch, Metrics: map[string]float64{
			track.MetricLoss: rec.Loss, track.MetricLR: rec.LR, track.MetricGradNorm: rec.GradNorm,
			track.MetricSamplesPerS: rec.SamplesPerS, track.MetricSamples: float64(rec.Samples)}})
		if cfg.LogFormat == "json" {
			writeJSON(rec)
			return
		}
		if rec.Skipped { // amp.go: every skipped fp16 step is reported
			fmt.Fprintf(msg, "step %d: gradients hold inf/NaN; step skipped, loss scale now %g\n", rec.Step, rec.LossScale)
		}
		if progress && !rec.Stopped {
			return // the bar shows it
		}
		// Text is for people: --log-every, or about twenty lines per run.
		if rec.Step != 1 && rec.Step%every != 0 && rec.Step != total && !rec.Stopped {
			return
		}
		fmt.Fprintf(out, "step %d/%d  epoch %d  loss %.5f  lr %.3g  grad_norm %.4g  %s samples/s\n",
			rec.Step, total, rec.Epoch, rec.Loss, rec.LR, rec.GradNorm, track.FormatRate(rec.SamplesPerS))
	}
	r.onEval = func(e EvalRecord) {
		ev := e
		sum.LastEval = &ev
		metrics := map[string]float64{track.MetricValLoss: e.Loss, track.MetricValSamples: float64(e.Samples)}
		if e.HasAccuracy {
			metrics[track.MetricValAccuracy] = e.Accuracy
		}
		trackers.Eval(track.Record{Step: e.Step, Epoch: e.Epoch, Metrics: metrics})
		if cfg.LogFormat == "json" {
			if !e.HasAccuracy { // mse, l1, output:NAME: an accuracy would be a made-up 0
				writeJSON(lossOnlyEval{Epoch: e.Epoch, Step: e.Step, Loss: e.Loss, Samples: e.Samples})
				return
			}
			writeJSON(e)
			return
		}
		at := fmt.Sprintf("epoch %d", e.Epoch)
		if cfg.EvalEvery > 0 {
			at += fmt.Sprintf("  step %d", e.Step)
		}
		if !e.HasAccuracy {
			fmt.Fprintf(out, "%s  val_loss %.5f  (%d samples)\n", at, e.Loss, e.Samples)
			return
		}
		fmt.Fprintf(out, "%s  val_loss %.5f  val_accuracy %.2f%%  (%d samples)\n", at, e.Loss, 100*e.Accuracy, e.Samples)
	}
	if cfg.LogFormat != "json" {
		fmt.Fprintf(msg, "training %s: %d parameters in %d tensors (%d frozen), %d batches of %d per epoch, %d optimizer steps\n",
			cfg.Model, countElements(r.model.Prog.Params), len(r.model.Prog.Params), len(r.model.Prog.Frozen), r.loader.Len(), cfg.BatchSize, total)
	}
	return nil
}

// resume sets up the run control and, with --resume, restores a checkpoint; it returns the epoch to start from.
func (r *runner) resume() (int, error) {
	cfg, acc, msg, loader := r.cfg, r.acc, r.msg, r.loader
	startEpoch := 0
	control := newRunControl(cfg, acc) // control.go
	acc.RegisterForCheckpointing("run", control)
	r.control = control
	if cfg.Resume != "" {
		var err error
		dir := cfg.Resume
		if dir == "latest" {
			// loadLatest skips damaged checkpoints, naming them (resume.go).
			if dir, err = loadLatest(acc, cfg.Output, msg); errors.Is(err, ErrNoCheckpoint) {
				// The first start of a job that restarts with --resume
				// latest: nothing to resume yet.
				dir = ""
				if cfg.LogFormat != "json" {
					fmt.Fprintf(msg, "--resume latest: no checkpoint under %s yet; starting from the model's weights\n", cfg.Output)
				}
			} else if err != nil {
				return 0, fmt.Errorf("--resume latest: %w", err)
			}
		}
		if dir != "" {
			if cfg.Resume != "latest" {
				if err := acc.LoadState(dir); err != nil {
					return 0, fmt.Errorf("--resume: %w", err)
				}
			}
			if change := control.dataOrderChange(); change != "" {
				fmt.Fprintf(msg, "--resume: the data order differs from the run that wrote %s (%s): training continues from the same position in the data, but not exactly as that run would have\n", dir, change)
			}
			var skip int
			startEpoch, skip = acc.Position().ResumePoint(loader.Len())
			acc.SkipFirstBatches(loader, skip)
			if cfg.LogFormat != "json" {
				fmt.Fprintf(msg, "resumed from %s at step %d (epoch %d, batch %d)\n", dir, acc.Step(), startEpoch, skip)
			}
		}
	}
	return startEpoch, nil
}

// trainEpochs runs the epoch loop from startEpoch until the epochs or --steps are done or training stops early.
func (r *runner) trainEpochs(ctx context.Context, startEpoch int) error {
	cfg, acc, msg, val := r.cfg, r.acc, r.msg, r.val
	loop := &trainLoop{acc: acc, model: r.model, opt: r.opt, sched: r.sched, cfg: cfg, onStep: r.onStep,
		val: val, onEval: r.onEval, control: r.control, msg: msg}
	epochs := cfg.Epochs
	if cfg.Steps > 0 {
		epochs = math.MaxInt32 // --steps decides
	}
	for epoch := startEpoch; epoch < epochs && !(cfg.Steps > 0 && acc.Step() >= cfg.Steps); epoch++ {
		err := loop.epoch(ctx, r.loader, epoch)
		if err == nil && val != nil && cfg.EvalEvery == 0 {
			err = loop.epochEnd(ctx, epoch) // control.go
		}
		if errors.Is(err, errEarlyStop) {
			break
		}
		if err != nil {
			if stopped := (*StoppedError)(nil); errors.As(err, &stopped) {
				reportStop(msg, cfg, stopped) // control.go
			}
			return errors.Join(err, r.logErr)
		}
	}
	return nil
}

// finish fills in the summary, writes the outputs and closes the trackers.
func (r *runner) finish(start time.Time) (*Summary, error) {
	cfg, acc, msg, control, sum := r.cfg, r.acc, r.msg, r.control, r.sum
	if control.Best != nil && cfg.SaveBest != "" {
		sum.Best = control.Best
		fmt.Fprintf(msg, "best %s %.6g at step %d: %s\n", control.Best.Metric, control.Best.Value, control.Best.Step, filepath.Join(cfg.Output, control.Best.Checkpoint))
	}
	sum.Steps = acc.Step()
	sum.SkippedSteps = acc.SkippedSteps() // amp.go
	if n := len(sum.Records); n > 0 {
		sum.FinalLoss = sum.Records[n-1].Loss
	}
	if cfg.Output != "" {
		paths, err := saveOutputs(acc, r.model, cfg, r.trainDS) // export.go
		if err != nil {
			return sum, err
		}
		sum.Outputs = paths
		if cfg.LogFormat != "json" {
			fmt.Fprintf(msg, "wrote %v\n", paths)
		}
	}
	if err := r.trackers.Close(); err != nil {
		return sum, err
	}
	if r.logErr != nil {
		return sum, r.logErr
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

// openTrackers starts the progress bar (text logs on a terminal), the
// TensorBoard writer (--log-dir), the Prometheus endpoint (--metrics-addr)
// and the loss curve (loss.png in --output).
func openTrackers(cfg Config, out io.Writer, total int) (track.Tracker, error) {
	var ts []track.Tracker
	if cfg.LogFormat != "json" {
		ts = append(ts, track.NewProgress(out, total))
	}
	if cfg.LogDir != "" {
		tb, err := track.NewTensorBoard(cfg.LogDir)
		if err != nil {
			return nil, fmt.Errorf("--log-dir: %w", err)
		}
		ts = append(ts, tb)
	}
	if cfg.MetricsAddr != "" {
		p, err := track.NewPrometheus(cfg.MetricsAddr)
		if err != nil {
			track.Multi(ts...).Close()
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		ts = append(ts, p)
	}
	if cfg.Output != "" {
		if err := os.MkdirAll(cfg.Output, 0o755); err != nil {
			track.Multi(ts...).Close()
			return nil, fmt.Errorf("--output: %w", err)
		}
		ts = append(ts, track.NewLossCurve(filepath.Join(cfg.Output, "loss.png")))
	}
	return track.Multi(ts...), nil
}

// recordingGCPercent is the GOGC of the step that records the memory plan.
const recordingGCPercent = 10

// trainLoop is the body of `onnxtrain train`, on the Accelerator API.
type trainLoop struct {
	acc    *Accelerator
	model  *Model
	opt    *Optimizer
	sched  *Scheduler
	cfg    Config
	onStep func(StepRecord)
	// training control (control.go)
	val     *DataLoader
	onEval  func(EvalRecord)
	control *runControl
	msg     io.Writer

	// the current accumulation window
	lossSum float64
	micro   int
	samples int
	started time.Time
	// recorded is set once the first micro-step (the one that records the
	// memory plan) has run.
	recorded bool
}

// epoch trains over one epoch, stopping early at --steps.
func (t *trainLoop) epoch(ctx context.Context, loader *DataLoader, epoch int) error {
	t.started = time.Now()
	for b, err := range loader.Epoch(ctx, epoch) {
		if err != nil {
			return err
		}
		err = t.acc.Accumulate(func() error { return t.microStep(ctx, b, epoch) })
		if err != nil {
			return err
		}
		if t.cfg.Steps > 0 && t.acc.Step() >= t.cfg.Steps {
			break
		}
	}
	return nil
}

func (t *trainLoop) microStep(ctx context.Context, b *data.Batch, epoch int) error {
	// The first step records the memory plan: its tensors come from the
	// Go heap and are garbage once it ends, and the next step allocates the
	// plan's arena. A user wants the peak of the run to be the larger of
	// the two, not their sum: collect often during that one step (its
	// garbage would otherwise pile up to GOGC's 2x the live heap) and hand
	// the freed pages back to the OS before the arena is allocated. Later
	// steps run from the arena and allocate little, so GOGC is restored.
	if !t.recorded {
		if old := debug.SetGCPercent(recordingGCPercent); old < recordingGCPercent {
			debug.SetGCPercent(old) // GOGC is tighter already, or off
		} else {
			defer func() {
				debug.SetGCPercent(old)
				debug.FreeOSMemory()
			}()
		}
		t.recorded = true
	}
	out, err := t.model.Forward(ctx, b)
	if err != nil {
		return fmt.Errorf("step %d, epoch %d: %w", t.acc.Step()+1, epoch, err)
	}
	if math.IsNaN(out.Loss) || math.IsInf(out.Loss, 0) {
		return fmt.Errorf("train: step %d (epoch %d): %w (%v); try a lower --lr, --clip-grad-norm, or check the data for NaNs", t.acc.Step()+1, epoch, ErrNaNLoss, out.Loss)
	}
	if err := t.acc.Backward(out); err != nil {
		return err
	}
	t.lossSum += out.Loss
	t.micro++
	t.samples += out.Size
	if !t.acc.SyncGradients() {
		return nil
	}
	norm, err := t.acc.ClipGradNorm(t.model, t.cfg.ClipGradNorm)
	if err != nil {
		return err
	}
	if t.cfg.ClipGradValue > 0 {
		if err := t.acc.ClipGradValue(t.model, t.cfg.ClipGradValue); err != nil {
			return err
		}
	}
	lr := t.sched.LR()
	if err := t.opt.Step(); err != nil {
		return err
	}
	t.sched.Step()
	t.opt.ZeroGrad()
	loss := t.lossSum / float64(t.micro)
	stop := stopRequested(ctx) // signal.go
	if t.acc.NumProcesses() > 1 {
		// The logged loss is the mean over the whole global batch; a stop
		// request of any process stops them all after this step.
		m, err := t.acc.ReduceMean(ctx, loss, boolFloat(stop))
		if err != nil {
			return err
		}
		loss, stop = m[0], m[1] > 0
	}
	// Every process sees the same number of samples (padded shards).
	samples := t.samples * t.acc.NumProcesses()
	rec := StepRecord{Step: t.acc.Step(), Epoch: epoch, Loss: loss, LR: lr, GradNorm: norm,
		Samples: samples, SamplesPerS: float64(samples) / time.Since(t.started).Seconds()}
	if t.acc.GradScaler() != nil { // amp.go
		rec.LossScale, rec.Skipped = t.acc.LossScale(), t.acc.StepWasSkipped()
		if rec.Skipped {
			rec.GradNorm = 0 // inf or NaN, which JSON cannot carry
		}
	}
	t.lossSum, t.micro, t.samples, t.started = 0, 0, 0, time.Now()
	rec.Stopped = stop
	t.onStep(rec)
	return t.afterStep(ctx, rec) // control.go: evaluation, checkpoints, stops
}

// checkpoint saves the checkpoint of the current step under --output and
// prunes old ones (--keep-last), sparing the best (--save-best).
func (t *trainLoop) checkpoint() error {
	dir := filepath.Join(t.cfg.Output, CheckpointName(t.acc.Step()))
	if err := t.acc.SaveState(dir); err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", t.acc.Step(), err)
	}
	if t.cfg.KeepLast > 0 && t.acc.IsMainProcess() {
		return PruneKeeping(t.cfg.Output, t.cfg.KeepLast, t.bestToKeep())
	}
	return nil
}

// Evaluate runs the model in inference mode over a loader: the mean loss
// (weighted by batch size) and, for classification, the accuracy.
func Evaluate(ctx context.Context, acc *Accelerator, m *Model, loader *DataLoader, epoch int) (EvalRecord, error) {
	rec := EvalRecord{Epoch: epoch, Step: acc.Step()}
	var lossSum float64
	correct := 0
	for b, err := range loader.Epoch(ctx, 0) {
		if err != nil {
			return rec, err
		}
		loss, logits, err := m.Evaluate(ctx, b)
		if err != nil {
			return rec, err
		}
		n := b.Size - b.Padding
		lossSum += loss * float64(n)
		rec.Samples += n
		if logits != nil && b.Labels != nil && m.Prog.cfg.Loss.Kind == "cross_entropy" {
			if logits, err = acc.GatherForMetrics(ctx, logits, b); err != nil {
				return rec, err
			}
			correct += countCorrect(logits, b.Labels)
		}
	}
	if acc.NumProcesses() > 1 {
		sums, err := acc.ReduceSum(ctx, lossSum, float64(correct), float64(rec.Samples))
		if err != nil {
			return rec, err
		}
		lossSum, correct, rec.Samples = sums[0], int(math.Round(sums[1])), int(math.Round(sums[2]))
	}
	rec.HasAccuracy = m.Prog.cfg.Loss.Kind == "cross_entropy"
	if rec.Samples > 0 {
		rec.Loss = lossSum / float64(rec.Samples)
		rec.Accuracy = float64(correct) / float64(rec.Samples)
	}
	return rec, nil
}

// joinGroup joins the process group a launcher describes in the
// environment (torchrun, Kubeflow, Slurm, Open MPI); nil when this process
// trains alone. --dist-timeout, when given, overrides ONNXTRAIN_DIST_TIMEOUT,
// and --debug turns on the cross-rank checks as ONNXTRAIN_DIST_DEBUG does.
func joinGroup(ctx context.Context, tc Config) (*distrib.Group, error) {
	if tc.Comm == "mpi" {
		return joinMPIGroup(ctx, tc)
	}
	distributed := false
	for _, k := range []string{"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"} {
		if v := os.Getenv(k); v != "" && v != "1" {
			distributed = true
		}
	}
	if !distributed {
		return nil, nil
	}
	cfg, err := distrib.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("train: data parallel: %w", err)
	}
	if cfg.WorldSize <= 1 {
		return nil, nil
	}
	if tc.DistTimeout > 0 {
		cfg.Timeout = tc.DistTimeout
	}
	cfg.Debug = cfg.Debug || tc.Debug
	if err := prepareJoin(&cfg, tc); err != nil { // join_settings.go: secret, settings, logger
		return nil, err
	}
	g, err := distrib.Init(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("train: joining the process group (rank %d of %d): %w", cfg.Rank, cfg.WorldSize, err)
	}
	return g, nil
}

// joinMPIGroup joins MPI_COMM_WORLD (--comm mpi): MPI gives the rank and
// the world size. The group is returned even in a world of one, so that
// closing it finalises MPI.
func joinMPIGroup(ctx context.Context, tc Config) (*distrib.Group, error) {
	cfg := distrib.Config{Timeout: tc.DistTimeout, Debug: tc.Debug}
	if err := prepareJoin(&cfg, tc); err != nil { // join_settings.go
		return nil, err
	}
	env, envErr := distrib.FromEnv()
	if envErr == nil {
		if cfg.Timeout == 0 {
			cfg.Timeout = env.Timeout
		}
		cfg.Debug = cfg.Debug || env.Debug
	}
	g, err := distrib.InitMPI(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("train: --comm mpi: %w", err)
	}
	// Started by another launcher, each process is an MPI world of its own.
	if envErr == nil && env.WorldSize != g.WorldSize() {
		g.Close()
		return nil, fmt.Errorf("train: --comm mpi: MPI sees a world of %d but the %s launcher's environment says %d processes: start the workers with mpirun, or use --comm tcp",
			g.WorldSize(), env.Launcher, env.WorldSize)
	}
	return g, nil
}

func countElements(ps []*Parameter) int {
	n := 0
	for _, p := range ps {
		n += p.Value.Size()
	}
	return n
}

// SaveModel writes the trained model into dir as model.onnx (the inference
// graph with the trained weights, see InferenceModel) and model.safetensors
// (the parameters and buffers by initializer name).
func SaveModel(dir string, prog *Program) ([]string, error) {
	return SaveModelFiles(dir, prog, SaveOptions{})
}
