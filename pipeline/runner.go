package pipeline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// Batch is one micro-batch: the graph inputs by name and the labels of an
// appended loss (nil when the loss is in the graph).
type Batch struct {
	Inputs map[string]*graph.Tensor
	Labels *graph.Tensor
}

// RunnerConfig configures an in-process pipeline.
type RunnerConfig struct {
	// Stage builds the stage programs.
	Stage StageConfig
	// Devices names the device of each rank ("cpu:0", "cpu:1", ...);
	// empty means cpu:r for rank r. Each rank runs in its own goroutine
	// and activations pass between ranks in memory. Each CPU device is
	// its own worker pool over its share of the cores (Workers): ranks
	// on one device share its pool. "cpu:0=3" gives the device 3 workers
	// (the --devices syntax; as Workers, for that rank).
	Devices []string
	// Workers is, per rank, how many cores its device's kernels use (0
	// or absent: the device's share, GOMAXPROCS divided evenly over the
	// distinct devices, at least 1). Ranks on one device must agree.
	// With a Transport only this process's rank's count applies (0: the
	// process's kernels use all its cores).
	Workers []int
	// NewOptimizer makes the optimizer of one stage over that stage's own
	// parameters; nil leaves stepping to the caller (Grads).
	NewOptimizer func(stage int, params []*optim.Param) (optim.Optimizer, error)
	// RecvTimeout bounds the wait for one receive (default 5 minutes).
	RecvTimeout time.Duration
	// Transport, when set, makes this Runner one rank (Rank) of a pipeline
	// whose ranks run in separate processes: it builds and runs only the
	// stages of that rank, and sends and receives through the transport.
	// Group (the processes of the pipeline, rank for rank) then carries
	// the losses, the gradient norm and the gradients of tied weights.
	Transport Transport
	Rank      int
	Group     *distrib.Group
	// Replicas > 1 makes Group hold that many pipeline replicas (data
	// parallel): process Replica*Ranks + r is rank r of replica Replica,
	// and the Transport's peers are numbered within the replica (see
	// ReplicaTransport). Gradients are averaged over the replicas, losses
	// gathered from every replica's last stage.
	Replicas, Replica int
	// SyncBatchNorm sums the batch statistics of the stages' rewritten
	// BatchNorms (StageConfig.Rewrite) over the replicas of each rank
	// (syncbn.go).
	SyncBatchNorm bool
	// Zero shards each stage over the replicas of that stage (zero.go):
	// 1 (ZeRO-1) its optimizer state, each replica stepping the
	// parameters it owns and sending them to the others; 2 (ZeRO-2) also
	// its gradients, reduce-scattered over the replicas of the stage so
	// that each keeps the averaged gradients of its own parameters only.
	// 0 shards nothing; without replicas (or a Group) there is nothing
	// to shard over.
	Zero int
}

// Runner runs one pipeline replica in one process: a schedule's action
// lists, one goroutine per rank, activations and gradients passed in
// memory. Each stage owns its parameters, gradients and optimizer state.
type Runner struct {
	Plan     *Plan
	Schedule *Schedule
	Stages   []*StageProgram
	Devices  []string
	// Workers is each rank's worker count on its device (nil with a
	// Transport: all of the process's cores).
	Workers []int

	cfg    RunnerConfig
	params [][]*optim.Param // per stage, the optimizer's view
	opts   []optim.Optimizer
	owned  map[int][]*optim.Param // per stage, what this replica steps (ZeRO)
	grads  [][]*graph.Tensor      // per stage, accumulated over the step
	last   StepStats
	seq    int64 // steps run, numbering the messages
	// evalSeq counts evaluations (their messages' negative step numbers)
	evalSeq int64
	// with replicas: the whole model's averaged gradient of the last step
	full     []float32
	fullOff  map[string]int
	fullSize map[string]int
	fullName []string
	// profile: per stage, time in each compute kind, passes run, and the
	// most bytes one micro-batch's forward kept for the backward.
	passTime  [][4]time.Duration
	passCount [][4]int
	kept      []int64
	// held: bytes the forward passes of the micro-batches in flight keep
	// now, per stage; heldPeak its most; heldOf each micro-batch's share.
	held, heldPeak []int64
	heldOf         []map[int]int64 // per stage, touched by its rank's goroutine alone
	// the same summed over each rank's stages (interleaved and zbv ranks
	// hold two or more), and its most
	rankHeld, rankHeldPeak []int64
	// cpuClock times passes by their thread's CPU time (MinStageSeconds
	// on one-worker devices) instead of the wall clock.
	cpuClock bool
	// lossScale is the factor the backward seeds carry (amp.go).
	lossScale float64
	// trace: record every action's start and end (SetTrace, Trace)
	tracing bool
	trace   [][]TraceEvent
	// flushes: several runs of the schedule make one optimizer step
	// (SetFlush); whether the next run is the step's first and last.
	flushes                     int
	notFirstFlush, notLastFlush bool
}

// SetFlush makes the next ForwardBackward (or ForwardBackwardPartial) one
// of flushes runs of the schedule whose gradients make one optimizer step,
// as one process with --grad-accum flushes×M does: every loss is seeded
// with 1/(flushes×M), the gradient sums start at the first run only, and
// the sums over tied copies and replicas are made after the last. The
// default, SetFlush(true, true, 1), is one run per step.
func (r *Runner) SetFlush(first, last bool, flushes int) {
	r.notFirstFlush, r.notLastFlush, r.flushes = !first, !last, flushes
}

// lastFlush reports whether the current run of the schedule ends the
// optimizer step's gradients.
func (r *Runner) lastFlush() bool { return !r.notLastFlush }

// StageProfile is what the runner measured of one stage since the last
// ResetProfile: mean time per pass and the bytes a micro-batch keeps.
type StageProfile struct {
	Forward, Backward, BackwardInput, BackwardWeight time.Duration
	// KeptBytes is the most bytes one micro-batch's forward pass left for
	// the backward (activations, received inputs, outputs to send).
	KeptBytes int64
	// HeldPeakBytes is the most bytes the forward passes of the
	// micro-batches in flight kept at once (what the schedule holds).
	HeldPeakBytes int64
}

// Profile returns per-stage measurements since the last ResetProfile.
func (r *Runner) Profile() []StageProfile {
	out := make([]StageProfile, len(r.Stages))
	for s := range out {
		mean := func(k Kind) time.Duration {
			if r.passCount[s][k] == 0 {
				return 0
			}
			return r.passTime[s][k] / time.Duration(r.passCount[s][k])
		}
		out[s] = StageProfile{Forward: mean(Forward), Backward: mean(Backward), BackwardInput: mean(BackwardInput),
			BackwardWeight: mean(BackwardWeight), KeptBytes: r.kept[s], HeldPeakBytes: r.heldPeak[s]}
	}
	return out
}

// HeldPeakByRank is, per rank, the most bytes the forward passes of its
// stages' micro-batches in flight kept at once since the last
// ResetProfile: the peak activation memory each rank's schedule holds.
func (r *Runner) HeldPeakByRank() []int64 { return append([]int64(nil), r.rankHeldPeak...) }

// ResetProfile clears the measurements.
func (r *Runner) ResetProfile() {
	r.passTime = make([][4]time.Duration, len(r.Stages))
	r.passCount = make([][4]int, len(r.Stages))
	r.kept = make([]int64, len(r.Stages))
	r.held, r.heldPeak = make([]int64, len(r.Stages)), make([]int64, len(r.Stages))
	r.heldOf = make([]map[int]int64, len(r.Stages))
	r.rankHeld, r.rankHeldPeak = make([]int64, r.Schedule.Ranks), make([]int64, r.Schedule.Ranks)
	for s := range r.heldOf {
		r.heldOf[s] = map[int]int64{}
	}
}

// TraceEvent is one action a rank ran in a traced step: its wall-clock
// start and end since the step began. For a receive the span is the
// wait for the message; for a send, handing it on.
type TraceEvent struct {
	Rank       int
	Action     Action
	Start, End time.Duration
}

// SetTrace makes every following step record each rank's timeline of
// actions (Trace); off, nothing is recorded.
func (r *Runner) SetTrace(on bool) { r.tracing = on }

// Trace is the timeline of the last traced step: per rank (of this
// process), its actions in the order they ran. Nil when tracing is off.
func (r *Runner) Trace() [][]TraceEvent {
	out := make([][]TraceEvent, len(r.trace))
	for i, t := range r.trace {
		out[i] = append([]TraceEvent(nil), t...)
	}
	return out
}

// Replan replaces a zero-bubble schedule (zb1p, zbv) by the same
// schedule planned for the mean pass times this Runner measured since the
// last ResetProfile (NewWithCosts): the list scheduler then fills the
// waits the passes' real, unequal costs make, where the unit-cost plan
// fills those of equal ones. Gradients and losses stay the same (each
// stage's weight gradients still sum in micro-batch order). Other
// schedules' orders do not depend on costs: Replan leaves them. Every
// stage must have run since ResetProfile. Across processes (a Transport)
// every process of the Group must call Replan at the same point: the
// processes exchange their stages' times (AllGatherObject; replicas of a
// stage averaged) and all plan the same lists.
func (r *Runner) Replan() error { return r.ReplanContext(context.Background()) }

// ErrNotReplanned is what ReplanContext returns (wrapped) when no list
// could be planned for the measured costs; the runner keeps its schedule,
// which stays correct.
var ErrNotReplanned = errors.New("pipeline: no schedule planned for the measured pass times")

// ReplanContext is Replan, its exchange of pass times bounded by ctx.
func (r *Runner) ReplanContext(ctx context.Context) error {
	sc := r.Schedule
	if !sc.SplitBackward() || sc.Name == "sequential" {
		return nil
	}
	S := sc.Stages()
	// per stage: summed mean times of F, BI, BW, and how many processes
	// measured the stage
	type stageTimes struct {
		Seconds [3]float64
		N       int
	}
	times := make([]stageTimes, S)
	prof := r.Profile()
	for s := range prof {
		if r.Stages[s] == nil || r.passCount[s][Forward] == 0 {
			continue
		}
		times[s] = stageTimes{Seconds: [3]float64{prof[s].Forward.Seconds(), prof[s].BackwardInput.Seconds(), prof[s].BackwardWeight.Seconds()}, N: 1}
	}
	if r.cfg.Transport != nil {
		if r.cfg.Group == nil {
			return fmt.Errorf("pipeline: Replan across processes needs the Group to exchange the stages' pass times")
		}
		b, err := json.Marshal(times)
		if err != nil {
			return err
		}
		parts, err := r.cfg.Group.AllGatherObject(ctx, b)
		if err != nil {
			return fmt.Errorf("pipeline: Replan: exchanging pass times: %w", err)
		}
		sum := make([]stageTimes, S)
		for p, part := range parts {
			var got []stageTimes
			if err := json.Unmarshal(part, &got); err != nil || len(got) != S {
				return fmt.Errorf("pipeline: Replan: process %d sent pass times for %d stages (want %d): %v", p, len(got), S, err)
			}
			for s, st := range got {
				for k := range st.Seconds {
					sum[s].Seconds[k] += st.Seconds[k]
				}
				sum[s].N += st.N
			}
		}
		times = sum
	}
	c := Costs{Forward: make([]float64, S), BackwardInput: make([]float64, S), BackwardWeight: make([]float64, S)}
	for s, st := range times {
		if st.N == 0 {
			return fmt.Errorf("pipeline: Replan: stage %d has run no pass since the profile was reset", s)
		}
		n := float64(st.N)
		c.Forward[s], c.BackwardInput[s], c.BackwardWeight[s] = st.Seconds[0]/n, st.Seconds[1]/n, st.Seconds[2]/n
	}
	planned, err := NewWithCosts(sc.Name, sc.Ranks, sc.Micro, sc.Chunks, c)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotReplanned, err)
	}
	r.Schedule = planned
	return nil
}

// StepStats is what one step measured.
type StepStats struct {
	// Losses per micro-batch, and their mean.
	Losses []float64
	Loss   float64
	// Wall is the step's wall time; Busy[r] rank r's compute time in it.
	Wall time.Duration
	Busy []time.Duration
}

// IdleFraction is rank r's idle time over the step's wall time.
func (s *StepStats) IdleFraction(r int) float64 {
	if s.Wall <= 0 {
		return 0
	}
	return 1 - float64(s.Busy[r])/float64(s.Wall)
}

// NewRunner builds the stage programs of plan for sched (the plan's stage
// count must be the schedule's Ranks × Chunks).
func NewRunner(plan *Plan, sched *Schedule, cfg RunnerConfig) (*Runner, error) {
	if len(plan.Stages) != sched.Stages() {
		return nil, fmt.Errorf("pipeline: the plan has %d stages, schedule %s over %d ranks with %d chunks each needs %d", len(plan.Stages), sched.Name, sched.Ranks, sched.Chunks, sched.Stages())
	}
	if cfg.RecvTimeout <= 0 {
		cfg.RecvTimeout = 5 * time.Minute
	}
	devs := cfg.Devices
	if len(devs) == 0 {
		for r := 0; r < sched.Ranks; r++ {
			devs = append(devs, fmt.Sprintf("cpu:%d", r))
		}
	}
	if len(devs) != sched.Ranks {
		return nil, fmt.Errorf("pipeline: %d devices (%s) for %d pipeline ranks", len(devs), strings.Join(devs, ","), sched.Ranks)
	}
	devs, given, err := splitDeviceWorkers(devs, cfg.Workers)
	if err != nil {
		return nil, err
	}
	cfg.Devices, cfg.Workers = devs, given
	for _, d := range devs {
		if !strings.HasPrefix(d, "cpu") {
			return nil, fmt.Errorf("pipeline: device %q: only cpu devices exist in this build", d)
		}
	}
	cfg.Stage.SplitBackward = sched.SplitBackward()
	if cfg.Transport != nil {
		if cfg.Rank < 0 || cfg.Rank >= sched.Ranks {
			return nil, fmt.Errorf("pipeline: rank %d of a %d-rank pipeline", cfg.Rank, sched.Ranks)
		}
		if cfg.Replicas < 1 {
			cfg.Replicas = 1
		}
		if cfg.Group != nil && cfg.Group.WorldSize() != sched.Ranks*cfg.Replicas {
			return nil, fmt.Errorf("pipeline: a process group of %d for %d replicas of %d pipeline ranks", cfg.Group.WorldSize(), cfg.Replicas, sched.Ranks)
		}
		if cfg.Replicas > 1 && cfg.Group == nil {
			return nil, fmt.Errorf("pipeline: %d replicas need the process group", cfg.Replicas)
		}
	}
	r := &Runner{Plan: plan, Schedule: sched, Devices: devs, cfg: cfg}
	r.rankHeld, r.rankHeldPeak = make([]int64, sched.Ranks), make([]int64, sched.Ranks)
	if cfg.Transport == nil {
		w, err := deviceWorkers(devs, cfg.Workers, runtime.GOMAXPROCS(0))
		if err != nil {
			return nil, err
		}
		r.Workers = w
	} else if len(cfg.Workers) == sched.Ranks && cfg.Workers[cfg.Rank] > 0 {
		// one rank per process: its device pool of the given count
		r.Workers = make([]int, sched.Ranks)
		r.Workers[cfg.Rank] = cfg.Workers[cfg.Rank]
	}
	for s := range plan.Stages {
		if !r.holds(s) {
			r.Stages = append(r.Stages, nil)
			r.params = append(r.params, nil)
			r.grads = append(r.grads, nil)
			r.opts = append(r.opts, nil)
			r.passTime = append(r.passTime, [4]time.Duration{})
			r.passCount = append(r.passCount, [4]int{})
			r.kept = append(r.kept, 0)
			r.held, r.heldPeak, r.heldOf = append(r.held, 0), append(r.heldPeak, 0), append(r.heldOf, map[int]int64{})
			continue
		}
		scfg := cfg.Stage
		if r.Workers != nil && scfg.Tuning.Workers == 0 && r.Workers[sched.RankOf(s)] > 0 {
			// the stage's programs run on its rank's device pool
			rk := sched.RankOf(s)
			scfg.Tuning.Workers, scfg.Tuning.Device = r.Workers[rk], devs[rk]
		}
		sp, err := BuildStage(plan, s, scfg)
		if err != nil {
			return nil, err
		}
		r.Stages = append(r.Stages, sp)
		ps := make([]*optim.Param, len(sp.Params))
		for i, p := range sp.Params {
			ps[i] = &optim.Param{Name: p.Name, Value: p.Value}
		}
		r.params = append(r.params, ps)
		r.passTime = append(r.passTime, [4]time.Duration{})
		r.passCount = append(r.passCount, [4]int{})
		r.kept = append(r.kept, 0)
		r.held, r.heldPeak, r.heldOf = append(r.held, 0), append(r.heldPeak, 0), append(r.heldOf, map[int]int64{})
		r.grads = append(r.grads, make([]*graph.Tensor, len(sp.Params)))
		// Each micro-batch's parameter gradients are added into the
		// step's sums inside the pass that computes them (AccumulateGrad
		// over the stage's gradient-sum state): r.grads holds those
		// buffers themselves, for the whole run.
		copy(r.grads[s], sp.GradSums())
		if cfg.NewOptimizer != nil {
			o, err := cfg.NewOptimizer(s, r.optimizerParams(s, ps))
			if err != nil {
				return nil, fmt.Errorf("pipeline: stage %d: optimizer: %w", s, err)
			}
			r.opts = append(r.opts, o)
		} else {
			r.opts = append(r.opts, nil)
		}
	}
	return r, nil
}

// holds reports whether this Runner runs stage s (all stages in one
// process; a rank's own with a Transport).
func (r *Runner) holds(s int) bool {
	return r.cfg.Transport == nil || r.Schedule.RankOf(s) == r.cfg.Rank
}

// Optimizer is stage s's optimizer (nil without NewOptimizer).
func (r *Runner) Optimizer(s int) optim.Optimizer {
	if s < len(r.opts) {
		return r.opts[s]
	}
	return nil
}

// StateBytes measures what stage s holds for the whole run, from the
// tensors themselves: its parameters, their gradient sums and its
// optimizer's state (0 for a stage this Runner does not run). It reads
// the optimizer's state through State, which copies it: a measurement,
// not for a step's path.
func (r *Runner) StateBytes(s int) int64 {
	if s >= len(r.Stages) || r.Stages[s] == nil {
		return 0
	}
	size := func(t *graph.Tensor) int64 {
		if t == nil {
			return 0
		}
		return int64(t.Size() * max(t.DType.Size(), 1))
	}
	var n int64
	sp := r.Stages[s]
	for i, p := range sp.Params {
		n += size(p.Value) + size(sp.gradSums[i])
	}
	if o := r.Optimizer(s); o != nil {
		for k, t := range o.State() {
			if k != "step" && k != "lr" {
				n += size(t)
			}
		}
	}
	return n
}

// PassPeakBytes is the largest planned peak (the backend's memory plan of
// the latest run, outputs included) of stage s's compiled passes: the
// transient memory one pass needs beside what the stage holds. 0 where
// the backend reports no plan.
func (r *Runner) PassPeakBytes(s int) int64 {
	if s >= len(r.Stages) || r.Stages[s] == nil {
		return 0
	}
	var most int64
	sp := r.Stages[s]
	for _, ph := range []*phase{sp.fwd, sp.bwd, sp.bwdInput, sp.bwdWeight} {
		if ph == nil || ph.exe == nil {
			continue
		}
		if p, ok := ph.exe.(backend.PeakReporter); ok {
			most = max(most, p.PeakBytes())
		}
	}
	return most
}

// Params are stage s's parameters as its optimizer sees them; after Step
// (before the update) Grad holds the gradient of the step.
func (r *Runner) Params(s int) []*optim.Param { return r.params[s] }

// message is what moves between ranks: tensors by name.
type message map[string]*graph.Tensor

// ErrTimeout is wrapped by errors about a receive that waited too long.
var ErrTimeout = errors.New("pipeline: receive timed out")

// Step runs one optimizer step over len(micro) == Schedule.Micro
// micro-batches: the schedule's passes, the gradients of each stage
// summed over the micro-batches (and over the stages sharing a
// parameter), and each stage's optimizer step. The loss of a micro-batch
// is seeded with 1/M, so gradients are those of the mean loss, as one
// process with --grad-accum M computes them.
func (r *Runner) Step(ctx context.Context, micro []Batch) (*StepStats, error) {
	if err := r.ForwardBackward(ctx, micro); err != nil {
		return nil, err
	}
	if err := r.Update(); err != nil {
		return nil, err
	}
	st := r.last
	return &st, nil
}

// ForwardBackward runs the schedule's passes over the micro-batches and
// leaves each stage's summed gradients in Params(s)[i].Grad.
func (r *Runner) ForwardBackward(ctx context.Context, micro []Batch) error {
	if len(micro) != r.Schedule.Micro {
		return fmt.Errorf("pipeline: %d micro-batches for a schedule of %d", len(micro), r.Schedule.Micro)
	}
	return r.forwardBackward(ctx, r.Schedule, micro, r.Schedule.Micro)
}

// ForwardBackwardPartial runs fewer micro-batches than the schedule's M
// (the last window of an epoch) on the same schedule and layout, still
// seeding each loss with 1/M, as one process with --grad-accum M does.
func (r *Runner) ForwardBackwardPartial(ctx context.Context, micro []Batch) error {
	if len(micro) == r.Schedule.Micro {
		return r.ForwardBackward(ctx, micro)
	}
	if len(micro) == 0 || len(micro) > r.Schedule.Micro {
		return fmt.Errorf("pipeline: %d micro-batches for a schedule of %d", len(micro), r.Schedule.Micro)
	}
	sc, err := New(r.Schedule.Name, r.Schedule.Ranks, len(micro), r.Schedule.Chunks)
	if err != nil {
		return fmt.Errorf("%w (the last %d micro-batches of an epoch)", err, len(micro))
	}
	return r.forwardBackward(ctx, sc, micro, r.Schedule.Micro)
}

func (r *Runner) forwardBackward(ctx context.Context, sc *Schedule, micro []Batch, divisor int) error {
	M := sc.Micro
	S := sc.Stages()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// one channel per message of the step (in one process)
	tr := r.cfg.Transport
	seq := r.seq
	r.seq++
	ctx = r.withReplicaCollective(ctx, seq) // syncbn.go
	chans := map[msgKey]chan message{}
	for _, list := range sc.Actions {
		if tr != nil {
			break
		}
		for _, a := range list {
			if a.Kind == SendAct || a.Kind == SendGrad {
				chans[msgKey{a.Kind, a.Micro, a.Stage}] = make(chan message, 1)
			}
		}
	}
	// per stage and micro-batch: env, and the inbox of activations
	// (from stage-1) and gradients (from stage+1)
	envs := make([][]Env, S)
	actIn := make([][]message, S)
	gradIn := make([][]message, S)
	for s := 0; s < S; s++ {
		envs[s] = make([]Env, M)
		actIn[s] = make([]message, M)
		gradIn[s] = make([]message, M)
	}
	if !r.notFirstFlush {
		for _, sp := range r.Stages {
			if sp != nil {
				sp.ResetGradSums()
			}
		}
	}
	if r.flushes > 1 {
		divisor *= r.flushes
	}
	losses := make([]float64, M)
	busy := make([]time.Duration, sc.Ranks)
	scale := float32(r.seedScale() / float64(divisor)) // amp.go: fp16's loss scale
	r.trace = nil
	if r.tracing {
		r.trace = make([][]TraceEvent, sc.Ranks)
		for rank := range r.trace {
			r.trace[rank] = make([]TraceEvent, 0, len(sc.Actions[rank]))
		}
	}
	start := time.Now()

	runRank := func(rank int) error {
		clock := func() time.Duration { return time.Since(start) }
		if r.cpuClock {
			// profiling on one worker: the thread's CPU time (cpuclock_*.go)
			if now, unlock, ok := threadClock(); ok {
				defer unlock()
				clock = now
			}
		}
		var trace *[]TraceEvent
		if r.trace != nil {
			trace = &r.trace[rank] // touched by this rank's goroutine alone
		}
		for _, a := range sc.Actions[rank] {
			if err := ctx.Err(); err != nil {
				return err
			}
			var began time.Duration
			if trace != nil {
				began = time.Since(start)
			}
			switch a.Kind {
			case SendAct:
				sp := r.Stages[a.Stage-1]
				msg := message{}
				for _, o := range sp.Outputs {
					msg[o] = envs[a.Stage-1][a.Micro][o]
				}
				if err := r.send(ctx, chans, seq, rank, a, msg); err != nil {
					return err
				}
			case SendGrad:
				sp := r.Stages[a.Stage]
				msg := message{}
				for _, in := range sp.Inputs {
					if g := sp.InputGrad(envs[a.Stage][a.Micro], in); g != nil {
						msg[in] = g
					}
				}
				if err := r.send(ctx, chans, seq, rank, a, msg); err != nil {
					return err
				}
			case RecvAct, RecvGrad:
				msg, err := r.recv(ctx, chans, seq, rank, a)
				if err != nil {
					return err
				}
				if a.Kind == RecvAct {
					actIn[a.Stage][a.Micro] = msg
				} else {
					gradIn[a.Stage-1][a.Micro] = msg
				}
			default:
				t0 := clock()
				if err := r.compute(ctx, sc, a, micro, envs, actIn, gradIn, losses, scale); err != nil {
					return fmt.Errorf("rank %d (%s): %w", rank, r.Devices[rank], err)
				}
				d := clock() - t0
				busy[rank] += d
				r.passTime[a.Stage][a.Kind] += d // a stage's passes run on one rank
				r.passCount[a.Stage][a.Kind]++
			}
			if trace != nil {
				*trace = append(*trace, TraceEvent{Rank: rank, Action: a, Start: began, End: time.Since(start)})
			}
		}
		return nil
	}
	errs := make([]error, sc.Ranks)
	var wg sync.WaitGroup
	for rank := 0; rank < sc.Ranks; rank++ {
		if tr != nil && rank != r.cfg.Rank {
			continue
		}
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			if err := runRank(rank); err != nil {
				errs[rank] = err
				cancel()
			}
		}(rank)
	}
	wg.Wait()
	wall := time.Since(start)
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if tr != nil {
		return r.finishRemote(ctx, losses, wall, busy)
	}
	// Tied weights: every copy gets the sum over the stages using it.
	for name, stages := range r.Plan.Shared {
		if !r.lastFlush() {
			break
		}
		var sum *graph.Tensor
		for _, s := range stages {
			g := r.grads[s][r.paramIndex(s, name)]
			if sum == nil {
				sum = g.Clone()
			} else {
				addInto(sum, g)
			}
		}
		for _, s := range stages {
			copy(r.grads[s][r.paramIndex(s, name)].Float32s(), sum.Float32s())
		}
	}
	for s := range r.params {
		for i, p := range r.params[s] {
			p.Grad = r.grads[s][i]
		}
	}
	mean := 0.0
	for _, l := range losses {
		mean += l
	}
	r.last = StepStats{Losses: losses, Loss: mean / float64(M), Wall: wall, Busy: busy}
	return nil
}

// Update steps every stage's optimizer with the gradients of the last
// ForwardBackward.
func (r *Runner) Update() error { return r.UpdateContext(context.Background()) }

// UpdateContext is Update, its exchange of parameters between replicas
// (ZeRO) bounded by ctx.
func (r *Runner) UpdateContext(ctx context.Context) error {
	for s, o := range r.opts {
		if o == nil {
			continue
		}
		if err := o.Step(r.stepParams(s)); err != nil {
			return fmt.Errorf("pipeline: stage %d: optimizer: %w", s, err)
		}
	}
	return r.syncShards(ctx)
}

func (r *Runner) paramIndex(s int, name string) int {
	for i, p := range r.Stages[s].Params {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// compute runs one compute action of stage a.Stage on micro-batch a.Micro.
func (r *Runner) compute(ctx context.Context, sc *Schedule, a Action, micro []Batch, envs [][]Env, actIn, gradIn [][]message, losses []float64, scale float32) error {
	s, mb := a.Stage, a.Micro
	sp := r.Stages[s]
	local := func(from int) bool { return sc.RankOf(from) == sc.RankOf(s) }
	switch a.Kind {
	case Forward:
		env := Env{}
		if s > 0 {
			in := actIn[s][mb]
			if local(s - 1) {
				in = message{}
				for _, o := range r.Stages[s-1].Outputs {
					in[o] = envs[s-1][mb][o]
				}
			}
			if in == nil {
				return fmt.Errorf("stage %d: forward of micro-batch %d before its activations arrived", s, mb)
			}
			for _, name := range sp.Inputs {
				t, ok := in[name]
				if !ok || t == nil {
					return fmt.Errorf("stage %d: micro-batch %d: activation %q is missing", s, mb, name)
				}
				env[name] = t
			}
			actIn[s][mb] = nil
		}
		b := micro[mb]
		for _, name := range sp.DataInputs {
			t, ok := b.Inputs[name]
			if !ok {
				return fmt.Errorf("stage %d: micro-batch %d has no array for graph input %q", s, mb, name)
			}
			env[name] = t
		}
		if sp.Labels != "" {
			if b.Labels == nil {
				return fmt.Errorf("stage %d: the loss needs labels and micro-batch %d has none", s, mb)
			}
			env[sp.Labels] = b.Labels
		}
		if err := sp.Forward(ctx, env, scale); err != nil {
			return err
		}
		envs[s][mb] = env
		var kept int64
		for _, t := range env {
			kept += int64(t.Size() * max(t.DType.Size(), 1))
		}
		r.kept[s] = max(r.kept[s], kept)
		rk := r.Schedule.RankOf(s)
		r.held[s] += kept - r.heldOf[s][mb]
		r.rankHeld[rk] += kept - r.heldOf[s][mb]
		r.heldOf[s][mb] = kept
		r.heldPeak[s] = max(r.heldPeak[s], r.held[s])
		r.rankHeldPeak[rk] = max(r.rankHeldPeak[rk], r.rankHeld[rk])
		if sp.Last {
			l := env[sp.Loss]
			if l == nil || l.Size() != 1 {
				return fmt.Errorf("stage %d: micro-batch %d: the forward pass gave no scalar loss %q", s, mb, sp.Loss)
			}
			losses[mb] = l.Float(0)
		}
	case Backward, BackwardInput:
		env := envs[s][mb]
		if !sp.Last {
			in := gradIn[s][mb]
			if local(s + 1) {
				in = message{}
				nx := r.Stages[s+1]
				for _, name := range nx.Inputs {
					if g := nx.InputGrad(envs[s+1][mb], name); g != nil {
						in[name] = g
					}
				}
			}
			if in == nil {
				return fmt.Errorf("stage %d: backward of micro-batch %d before its gradients arrived", s, mb)
			}
			for _, o := range sp.Outputs {
				if g, ok := in[o]; ok {
					sp.SetOutputGrad(env, o, g)
				}
			}
			gradIn[s][mb] = nil
		}
		var err error
		if a.Kind == Backward {
			err = sp.Backward(ctx, env)
		} else {
			err = sp.BackwardInput(ctx, env)
		}
		if err != nil {
			return err
		}
		if a.Kind == Backward {
			r.finish(s, mb, envs)
		}
	case BackwardWeight:
		if err := sp.BackwardWeight(ctx, envs[s][mb]); err != nil {
			return err
		}
		r.finish(s, mb, envs)
	}
	return nil
}

// finish drops what stage s kept for micro-batch mb (its parameter
// gradients are already in the step's sums), except the input gradients
// still to be sent or read by a previous stage on the rank.
func (r *Runner) finish(s, mb int, envs [][]Env) {
	sp := r.Stages[s]
	env := envs[s][mb]
	keep := Env{}
	for _, in := range sp.Inputs {
		if g := sp.InputGrad(env, in); g != nil {
			keep[inputGradPref+in] = g
		}
	}
	envs[s][mb] = keep
	r.held[s] -= r.heldOf[s][mb]
	r.rankHeld[r.Schedule.RankOf(s)] -= r.heldOf[s][mb]
	delete(r.heldOf[s], mb)
}

// addInto adds src to dst elementwise (float32).
func addInto(dst, src *graph.Tensor) {
	d, s := dst.Float32s(), src.Float32s()
	for i := range d {
		d[i] += s[i]
	}
}

// AverageReplicas makes the replicas of a data-parallel pipeline agree on
// their gradients: after each replica's ForwardBackward over its own
// micro-batches, every stage's gradients become the mean over the
// replicas (summed in replica order), as data parallel's all-reduce does.
// With R replicas of M micro-batches each, the update is that of one
// process with --grad-accum R×M. The replicas must share plan and schedule.
func AverageReplicas(replicas []*Runner) error {
	if len(replicas) < 2 {
		return nil
	}
	R := float32(len(replicas))
	ref := replicas[0]
	for k, r := range replicas[1:] {
		if len(r.grads) != len(ref.grads) {
			return fmt.Errorf("pipeline: replica %d has %d stages, replica 0 %d", k+1, len(r.grads), len(ref.grads))
		}
	}
	for s := range ref.grads {
		for i := range ref.grads[s] {
			sum := ref.grads[s][i].Clone()
			for _, r := range replicas[1:] {
				addInto(sum, r.grads[s][i])
			}
			v := sum.Float32s()
			for j := range v {
				v[j] /= R
			}
			for _, r := range replicas {
				copy(r.grads[s][i].Float32s(), v)
				r.params[s][i].Grad = r.grads[s][i]
			}
		}
	}
	return nil
}

// uniqueParams lists each parameter once (the first stage's copy of a
// shared one), in stage order.
func (r *Runner) uniqueParams() []*optim.Param {
	seen := map[string]bool{}
	var out []*optim.Param
	for s := range r.params {
		for _, p := range r.params[s] {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// syncShared copies the first copy's gradient of each shared parameter
// to the other copies.
func (r *Runner) syncShared() {
	for name, stages := range r.Plan.Shared {
		src := r.params[stages[0]][r.paramIndex(stages[0], name)].Grad
		for _, s := range stages[1:] {
			copy(r.params[s][r.paramIndex(s, name)].Grad.Float32s(), src.Float32s())
		}
	}
}

// ClipGradNorm clips the step's gradients, over all stages together, to a
// total L2 norm of maxNorm (<= 0: no clipping) and returns the norm before
// clipping (a shared parameter counts once), as optim.ClipGradNorm does
// for one process.
func (r *Runner) ClipGradNorm(maxNorm float64) (float64, error) {
	if maxNorm <= 0 {
		maxNorm = math.Inf(1)
	}
	if r.cfg.Transport != nil {
		return r.clipRemote(context.Background(), maxNorm)
	}
	n, err := optim.ClipGradNorm(r.uniqueParams(), maxNorm)
	if err != nil {
		return 0, err
	}
	r.syncShared()
	return n, nil
}

// ClipGradValue clamps every gradient element to [-v, v].
func (r *Runner) ClipGradValue(v float64) error {
	if r.cfg.Transport != nil {
		var all []*optim.Param
		for s := range r.params {
			if r.zero2() {
				all = append(all, r.stepParams(s)...) // the gradients this replica keeps
			} else {
				all = append(all, r.params[s]...)
			}
		}
		return optim.ClipGradValue(all, v)
	}
	if err := optim.ClipGradValue(r.uniqueParams(), v); err != nil {
		return err
	}
	r.syncShared()
	return nil
}

// SetLR sets every stage optimizer's learning rate.
func (r *Runner) SetLR(lr float64) {
	for _, o := range r.opts {
		if o != nil {
			o.SetLR(lr)
		}
	}
}

// LastStats is what the latest ForwardBackward measured.
func (r *Runner) LastStats() StepStats { return r.last }

// send delivers one message: to a channel in one process, through the
// transport across processes.
func (r *Runner) send(ctx context.Context, chans map[msgKey]chan message, seq int64, rank int, a Action, msg message) error {
	if tr := r.cfg.Transport; tr != nil {
		if err := tr.Send(ctx, a.Peer, a.MsgKey(seq), msg); err != nil {
			return fmt.Errorf("rank %d (%s): %v of micro-batch %d: %w", rank, r.Devices[rank], a.Kind, a.Micro, err)
		}
		return nil
	}
	chans[msgKey{a.Kind, a.Micro, a.Stage}] <- msg
	return nil
}

// recv waits for one message, at most RecvTimeout.
func (r *Runner) recv(ctx context.Context, chans map[msgKey]chan message, seq int64, rank int, a Action) (message, error) {
	kind, what := SendAct, "activations"
	if a.Kind == RecvGrad {
		kind, what = SendGrad, "gradients"
	}
	timeout := func() error {
		return fmt.Errorf("%w: rank %d (%s) waited %v for the %s of micro-batch %d, stage %d, from rank %d",
			ErrTimeout, rank, r.Devices[rank], r.cfg.RecvTimeout, what, a.Micro, a.Stage, a.Peer)
	}
	if tr := r.cfg.Transport; tr != nil {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.RecvTimeout)
		defer cancel()
		msg, err := tr.Recv(rctx, a.Peer, a.MsgKey(seq))
		switch {
		case err == nil:
			return msg, nil
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			return nil, timeout()
		case errors.Is(err, ErrPeerLost):
			return nil, fmt.Errorf("rank %d (%s), waiting for the %s of micro-batch %d, stage %d: %w", rank, r.Devices[rank], what, a.Micro, a.Stage, err)
		}
		return nil, err
	}
	timer := time.NewTimer(r.cfg.RecvTimeout)
	defer timer.Stop()
	select {
	case msg := <-chans[msgKey{kind, a.Micro, a.Stage}]:
		return msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, timeout()
	}
}

// finishRemote ends a step of one rank of a multi-process pipeline: the
// gradients of tied weights summed across ranks, the losses broadcast from
// the last stage's rank.
func (r *Runner) finishRemote(ctx context.Context, losses []float64, wall time.Duration, busy []time.Duration) error {
	g := r.cfg.Group
	if r.cfg.Replicas > 1 {
		return r.finishReplicated(ctx, losses, wall, busy)
	}
	if len(r.Plan.Shared) > 0 && r.lastFlush() {
		if g == nil {
			return fmt.Errorf("pipeline: tied weights across processes need the process group")
		}
		if err := r.averageTied(ctx, 1); err != nil { // zero.go
			return err
		}
	}
	for s := range r.params {
		for i, p := range r.params[s] {
			p.Grad = r.grads[s][i]
		}
	}
	if g != nil {
		last := r.Schedule.RankOf(len(r.Stages) - 1)
		var b []byte
		if r.cfg.Rank == last {
			for _, l := range losses {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l))
			}
		}
		b, err := g.BroadcastObject(ctx, b, last)
		if err != nil {
			return fmt.Errorf("pipeline: rank %d: receiving the losses from rank %d: %w", r.cfg.Rank, last, err)
		}
		if len(b) != 8*len(losses) {
			return fmt.Errorf("pipeline: rank %d: %d bytes of losses for %d micro-batches", r.cfg.Rank, len(b), len(losses))
		}
		for i := range losses {
			losses[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
	mean := 0.0
	for _, l := range losses {
		mean += l
	}
	r.last = StepStats{Losses: losses, Loss: mean / float64(len(losses)), Wall: wall, Busy: busy}
	return nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// clipRemote is ClipGradNorm across the processes of the pipeline.
func (r *Runner) clipRemote(ctx context.Context, maxNorm float64) (float64, error) {
	if r.zero2() {
		return r.clipZero2(ctx, maxNorm) // zero.go
	}
	if r.cfg.Replicas > 1 {
		return r.clipReplicated(maxNorm)
	}
	var sq float64
	for s := range r.params {
		for _, p := range r.params[s] {
			if st, ok := r.Plan.Shared[p.Name]; ok && st[0] != s {
				continue // a tied weight counts once, at its first stage
			}
			n := paramNorm(p.Grad.Float32s())
			sq += n * n
		}
	}
	buf := []float32{float32(sq)}
	if g := r.cfg.Group; g != nil {
		if err := g.AllReduce(ctx, buf, distrib.Sum); err != nil {
			return 0, fmt.Errorf("pipeline: rank %d: gradient norm: %w", r.cfg.Rank, err)
		}
	}
	total := float32(math.Sqrt(float64(buf[0])))
	coef := (1 / (total + float32(1e-6))) * float32(maxNorm)
	if coef < 1 {
		for s := range r.params {
			for _, p := range r.params[s] {
				v := p.Grad.Float32s()
				for i := range v {
					v[i] *= coef
				}
			}
		}
	}
	return float64(total), nil
}

// modelParams lists every trainable parameter of the plan, sorted, with
// its element count.
func (r *Runner) modelParams() {
	if r.fullOff != nil {
		return
	}
	r.fullOff, r.fullSize = map[string]int{}, map[string]int{}
	seen := map[string]bool{}
	for _, st := range r.Plan.Stages {
		for _, name := range st.Params {
			if !seen[name] {
				seen[name] = true
				r.fullName = append(r.fullName, name)
			}
		}
	}
	sort.Strings(r.fullName)
	off := 0
	for _, name := range r.fullName {
		n := r.Plan.g.Initializers[name].Size()
		r.fullOff[name], r.fullSize[name] = off, n
		off += n
	}
	r.full = make([]float32, off)
}

// finishReplicated ends a step of a rank when several pipeline replicas
// train together: one all-reduce over the whole model's gradient (each
// rank adds its stages' copies, so tied weights are summed across stages
// too), divided by the replicas; the losses of every replica's last stage
// gathered, their mean being the step's loss.
func (r *Runner) finishReplicated(ctx context.Context, losses []float64, wall time.Duration, busy []time.Duration) error {
	g := r.cfg.Group
	average := r.averageReplicas
	if r.zero2() {
		average = r.reduceScatterReplicas // zero.go
	}
	if err := average(ctx); err != nil {
		return err
	}
	var b []byte
	if r.cfg.Rank == r.Schedule.RankOf(len(r.Stages)-1) {
		for _, l := range losses {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l))
		}
	}
	parts, err := g.AllGatherObject(ctx, b)
	if err != nil {
		return fmt.Errorf("pipeline: rank %d: gathering the losses: %w", r.cfg.Rank, err)
	}
	var all []float64
	for _, part := range parts {
		for i := 0; i+8 <= len(part); i += 8 {
			all = append(all, math.Float64frombits(binary.LittleEndian.Uint64(part[i:])))
		}
	}
	if len(all) != len(losses)*r.cfg.Replicas {
		return fmt.Errorf("pipeline: rank %d: %d losses from %d replicas of %d micro-batches", r.cfg.Rank, len(all), r.cfg.Replicas, len(losses))
	}
	mean := 0.0
	for _, l := range all {
		mean += l
	}
	r.last = StepStats{Losses: all, Loss: mean / float64(len(all)), Wall: wall, Busy: busy}
	return nil
}

// averageReplicas is finishReplicated's gradient average (after the last
// flush of a step only): one all-reduce over the whole model's gradient
// (each rank adds its stages' copies, so tied weights are summed across
// stages too), divided by the replicas.
func (r *Runner) averageReplicas(ctx context.Context) error {
	if !r.lastFlush() {
		return nil
	}
	g := r.cfg.Group
	r.modelParams()
	clear(r.full)
	for s := range r.params {
		for i, p := range r.params[s] {
			off := r.fullOff[p.Name]
			for j, v := range r.grads[s][i].Float32s() {
				r.full[off+j] += v
			}
		}
	}
	if err := g.AllReduce(ctx, r.full, distrib.Sum); err != nil {
		return fmt.Errorf("pipeline: rank %d: averaging gradients over %d replicas: %w", r.cfg.Rank, r.cfg.Replicas, err)
	}
	inv := 1 / float32(r.cfg.Replicas)
	for i := range r.full {
		r.full[i] *= inv
	}
	for s := range r.params {
		for i, p := range r.params[s] {
			off := r.fullOff[p.Name]
			copy(r.grads[s][i].Float32s(), r.full[off:off+r.fullSize[p.Name]])
			p.Grad = r.grads[s][i]
		}
	}
	return nil
}

// paramNorm is one parameter's gradient norm as the one-process clip takes
// it: summed in float64, rounded to float32 (the norms of all parameters
// are then combined as PyTorch's clip_grad_norm_ does).
func paramNorm(g []float32) float64 {
	var acc float64
	for _, x := range g {
		acc += float64(x) * float64(x)
	}
	return float64(float32(math.Sqrt(acc)))
}

// clipReplicated clips with the norm of the whole averaged gradient,
// which every rank holds after finishReplicated.
func (r *Runner) clipReplicated(maxNorm float64) (float64, error) {
	var sq float64
	for _, name := range r.fullName {
		off, n := r.fullOff[name], r.fullSize[name]
		v := paramNorm(r.full[off : off+n])
		sq += v * v
	}
	total := float32(math.Sqrt(sq))
	coef := (1 / (total + float32(1e-6))) * float32(maxNorm)
	if coef < 1 {
		for s := range r.params {
			for _, p := range r.params[s] {
				v := p.Grad.Float32s()
				for i := range v {
					v[i] *= coef
				}
			}
		}
	}
	return float64(total), nil
}

// ReplicaTransport numbers the peers of t within one pipeline replica:
// peer r is process base+r of the group t connects.
func ReplicaTransport(t Transport, base int) Transport {
	if base == 0 {
		return t
	}
	return replicaTransport{t, base}
}

type replicaTransport struct {
	Transport
	base int
}

func (t replicaTransport) Send(ctx context.Context, peer int, k MsgKey, m map[string]*graph.Tensor) error {
	return t.Transport.Send(ctx, t.base+peer, k, m)
}

func (t replicaTransport) Recv(ctx context.Context, peer int, k MsgKey) (map[string]*graph.Tensor, error) {
	m, err := t.Transport.Recv(ctx, t.base+peer, k)
	return m, err
}

// deviceWorkers gives each rank its device's worker count: explicit
// (given[r] > 0) or the device's share of cores, spread evenly over the
// distinct devices in order of first use (the first ones get the
// remainder), at least 1 each.
func deviceWorkers(devs []string, given []int, cores int) ([]int, error) {
	if len(given) > 0 && len(given) != len(devs) {
		return nil, fmt.Errorf("pipeline: %d worker counts for %d ranks (devices %s)", len(given), len(devs), strings.Join(devs, ","))
	}
	var order []string
	index := map[string]int{}
	for _, d := range devs {
		if _, ok := index[d]; !ok {
			index[d] = len(order)
			order = append(order, d)
		}
	}
	share := make([]int, len(order))
	for i := range share {
		share[i] = max(1, cores/len(order))
		if i < cores%len(order) && cores >= len(order) {
			share[i]++
		}
	}
	set := make([]int, len(order))
	for r, d := range devs {
		if len(given) == 0 || given[r] == 0 {
			continue
		}
		if given[r] < 0 {
			return nil, fmt.Errorf("pipeline: rank %d (%s): %d workers", r, d, given[r])
		}
		if i := index[d]; set[i] != 0 && set[i] != given[r] {
			return nil, fmt.Errorf("pipeline: device %s given %d workers for one rank and %d for another", d, set[i], given[r])
		} else {
			set[i] = given[r]
		}
	}
	out := make([]int, len(devs))
	for r, d := range devs {
		i := index[d]
		out[r] = share[i]
		if set[i] > 0 {
			out[r] = set[i]
		}
	}
	return out, nil
}

// splitDeviceWorkers reads the worker counts written into device names
// ("cpu:0=3": device cpu:0 with 3 workers) into per-rank counts beside
// those given (a rank may have one or the other, or both if equal).
func splitDeviceWorkers(devs []string, given []int) ([]string, []int, error) {
	names := make([]string, len(devs))
	var counts []int
	for r, d := range devs {
		name, n, ok := strings.Cut(d, "=")
		names[r] = name
		if !ok {
			continue
		}
		w, err := strconv.Atoi(n)
		if err != nil || w < 1 {
			return nil, nil, fmt.Errorf("pipeline: device %q (rank %d): the worker count after '=' must be a whole number of at least 1, got %q", d, r, n)
		}
		if name == "" {
			return nil, nil, fmt.Errorf("pipeline: device %q (rank %d) has no name before '='", d, r)
		}
		if counts == nil {
			counts = make([]int, len(devs))
		}
		counts[r] = w
	}
	if counts == nil {
		return names, given, nil
	}
	if len(given) > 0 {
		if len(given) != len(devs) {
			return nil, nil, fmt.Errorf("pipeline: %d worker counts for %d ranks (devices %s)", len(given), len(devs), strings.Join(devs, ","))
		}
		for r := range counts {
			switch {
			case counts[r] == 0:
				counts[r] = given[r]
			case given[r] != 0 && given[r] != counts[r]:
				return nil, nil, fmt.Errorf("pipeline: device %q (rank %d): %d workers in its name, %d in Workers", devs[r], r, counts[r], given[r])
			}
		}
	}
	return names, counts, nil
}
