// Command pipelineidle measures pipeline schedules on a balanced model: a
// chain of equal MatMul+Add+Relu blocks whose loss (the mean square of the
// last activation) is in the graph, so that every stage costs the same.
//
//	go run ./bench/pipelineidle -ranks 2 -micro 8 -layers 8 -width 512 -batch 64
//
// It prints (markdown) the partition's estimated and measured per-stage
// times, then for each schedule every rank's idle fraction (idle time over
// the step's wall time): measured in this process, and simulated from the
// measured per-pass costs, beside (p-1)/(m+p-1) of GPipe and 1F1B.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

func main() {
	ranks := flag.Int("ranks", 2, "pipeline ranks")
	micro := flag.Int("micro", 8, "micro-batches per step")
	layers := flag.Int("layers", 8, "blocks (a multiple of 2*ranks keeps every schedule balanced)")
	width := flag.Int("width", 512, "block width")
	batch := flag.Int("batch", 64, "micro-batch size")
	steps := flag.Int("steps", 3, "measured steps per schedule (after one warm-up step)")
	write := flag.String("write", "", "instead of measuring, write the balanced model (DIR/model.onnx) and -examples rows of data (DIR/data.npz) for onnxtrain train")
	examples := flag.Int("examples", 64, "rows of data -write writes")
	fixture := flag.String("fixture", "", "instead, measure the partition of a committed fixture (DIR under models/: vit_tiny, transformer_loss or gpt, the small GPT export) into -ranks and 2×-ranks stages")
	memOnly := flag.Bool("memory", false, "with -fixture, only the memory tables (plan's estimate per stage against the measured)")
	only := flag.String("schedules", "", "comma-separated schedules to measure (default all; zb1p+ and zbv+ are zb1p and zbv replanned for the pass times measured in the run)")
	devices := flag.Bool("devices", false, "instead, time a 2-rank 1f1b step of the balanced model with the ranks on cpu:0,cpu:1 (each device its share of the cores), on one device cpu:0,cpu:0, on two devices of all the cores each, and with no pipeline (the stages in turn on one device)")
	flag.Parse()
	if *devices {
		if err := runDevices(*micro, *layers, *width, *batch, *steps); err != nil {
			fmt.Fprintln(os.Stderr, "pipelineidle:", err)
			os.Exit(1)
		}
		return
	}
	if *fixture != "" {
		if err := measureFixture(*fixture, *ranks, *micro, *batch, *steps, *memOnly); err != nil {
			fmt.Fprintln(os.Stderr, "pipelineidle:", err)
			os.Exit(1)
		}
		return
	}
	if *write != "" {
		if err := writeModel(*write, *layers, *width, *examples); err != nil {
			fmt.Fprintln(os.Stderr, "pipelineidle:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*ranks, *micro, *layers, *width, *batch, *steps, *only); err != nil {
		fmt.Fprintln(os.Stderr, "pipelineidle:", err)
		os.Exit(1)
	}
}

func balanced(layers, width int) *graph.Model {
	g := graph.NewGraph("balanced")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: int64(width), Known: true}}}}}
	g.Outputs = []*graph.ValueInfo{{Name: "loss", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}}}
	rng := rand.New(rand.NewPCG(1, 2))
	h := "x"
	for l := 0; l < layers; l++ {
		w := make([]float32, width*width)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * math.Sqrt(2/float64(width))) // He: activations keep their scale
		}
		wn, bn := fmt.Sprintf("block%d.weight", l), fmt.Sprintf("block%d.bias", l)
		g.Initializers[wn] = graph.FromFloat32(w, width, width)
		g.Initializers[bn] = graph.FromFloat32(make([]float32, width), width)
		mm, add, act := fmt.Sprintf("/block%d/MatMul", l), fmt.Sprintf("/block%d/Add", l), fmt.Sprintf("/block%d/Relu", l)
		g.Nodes = append(g.Nodes,
			&graph.Node{Name: mm, OpType: "MatMul", Inputs: []string{h, wn}, Outputs: []string{mm + "_out"}},
			&graph.Node{Name: add, OpType: "Add", Inputs: []string{mm + "_out", bn}, Outputs: []string{add + "_out"}},
			&graph.Node{Name: act, OpType: "Relu", Inputs: []string{add + "_out"}, Outputs: []string{act + "_out"}})
		h = act + "_out"
	}
	g.Nodes = append(g.Nodes,
		&graph.Node{Name: "/sq", OpType: "Mul", Inputs: []string{h, h}, Outputs: []string{"sq"}},
		&graph.Node{Name: "/loss", OpType: "ReduceMean", Inputs: []string{"sq"}, Outputs: []string{"loss"},
			Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
}

func batches(micro, batch, width int, seed uint64) []pipeline.Batch {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]pipeline.Batch, micro)
	for i := range out {
		x := make([]float32, batch*width)
		for k := range x {
			x[k] = float32(rng.NormFloat64())
		}
		out[i] = pipeline.Batch{Inputs: map[string]*graph.Tensor{"x": graph.FromFloat32(x, batch, width)}}
	}
	return out
}

func sgd(_ int, _ []*optim.Param) (optim.Optimizer, error) {
	return optim.NewSGD(optim.SGDConfig{LR: 1e-3})
}

func run(ranks, micro, layers, width, batch, steps int, only string) error {
	ctx := context.Background()
	m := balanced(layers, width)
	data := batches(micro, batch, width, 1)
	fmt.Printf("balanced model: %d blocks of %dx%d, micro-batch %d, %d micro-batches, %d ranks\n\n", layers, width, width, batch, micro, ranks)

	// Per-pass costs of every stage of every layout, measured one stage at
	// a time (sequential schedule: nothing runs beside the pass).
	costs := map[int]pipeline.Costs{}
	for _, stages := range []int{ranks, 2 * ranks} {
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: stages, BatchSize: batch, OptimizerSlots: 0})
		if err != nil {
			return err
		}
		seq, err := pipeline.Sequential(stages, micro, true)
		if err != nil {
			return err
		}
		r, err := pipeline.NewRunner(plan, seq, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"}, NewOptimizer: sgd})
		if err != nil {
			return err
		}
		if _, err := r.Step(ctx, data); err != nil {
			return err
		}
		r.ResetProfile()
		for i := 0; i < steps; i++ {
			if _, err := r.Step(ctx, data); err != nil {
				return err
			}
		}
		prof := r.Profile()
		c := pipeline.Costs{}
		fmt.Printf("%d stages: | stage | nodes | est. ms (F+B) | measured ms F / BI / BW | F+BI+BW | est. activations | kept per micro-batch |\n|---|---|---|---|---|---|---|\n", stages)
		var sum, worst float64
		for s, p := range prof {
			f, bi, bw := ms(p.Forward), ms(p.BackwardInput), ms(p.BackwardWeight)
			c.Forward = append(c.Forward, f)
			c.BackwardInput = append(c.BackwardInput, bi)
			c.BackwardWeight = append(c.BackwardWeight, bw)
			tot := f + bi + bw
			sum += tot
			worst = max(worst, tot)
			st := plan.Stages[s]
			fmt.Printf("| %d | %d | %.2f | %.2f / %.2f / %.2f | %.2f | %s | %s |\n", s, len(st.Nodes), st.EstSeconds*1e3, f, bi, bw, tot, mib(st.ActivationBytes), mib(p.KeptBytes))
		}
		fmt.Printf("\nslowest stage %.1f%% above the mean (measured)\n\n", (worst/(sum/float64(stages))-1)*100)
		costs[stages] = c
	}

	fmt.Printf("| schedule | rank | idle, measured | idle, simulated from measured pass costs | (p-1)/(m+p-1) | peak activations (chunks, simulated) | peak activations held, measured | step ms |\n|---|---|---|---|---|---|---|---|\n")
	var traces []string
	type entry struct {
		name    string
		planned bool // zb1p, zbv planned for the measured pass costs
	}
	var entries []entry
	for _, name := range pipeline.ScheduleNames() {
		entries = append(entries, entry{name, false})
	}
	entries = append(entries, entry{"zb1p", true}, entry{"zbv", true})
	if only != "" {
		want := map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			want[strings.TrimSpace(n)] = true
		}
		var keep []entry
		for _, e := range entries {
			if e.planned && want[e.name+"+"] || !e.planned && want[e.name] {
				keep = append(keep, e)
			}
		}
		entries = keep
	}
	for _, e := range entries {
		name := e.name
		sched, err := pipeline.New(name, ranks, micro, 2)
		if e.planned {
			name += " (replanned)"
		}
		if err != nil {
			fmt.Printf("| %s | - | %v | | | | | |\n", name, err)
			continue
		}
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: batch})
		if err != nil {
			return err
		}
		r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"}, NewOptimizer: sgd})
		if err != nil {
			return err
		}
		if _, err := r.Step(ctx, data); err != nil {
			return err
		}
		if e.planned {
			// two steps of the unit-cost plan measure the passes in this
			// run; Replan plans for their mean times
			r.ResetProfile()
			for i := 0; i < 2; i++ {
				if _, err := r.Step(ctx, data); err != nil {
					return err
				}
			}
			if err := r.Replan(); err != nil {
				return err
			}
			sched = r.Schedule
			r.ResetProfile()
			if _, err := r.Step(ctx, data); err != nil {
				return err
			}
		}
		idle := make([]float64, ranks)
		var wall time.Duration
		r.SetTrace(true)
		var tl timelines
		for i := 0; i < steps; i++ {
			st, err := r.Step(ctx, data)
			if err != nil {
				return err
			}
			wall += st.Wall
			for k := range idle {
				idle[k] += st.IdleFraction(k) / float64(steps)
			}
			tl.add(r.Trace(), st.Wall)
		}
		tr, err := tl.table(name, sched)
		if err != nil {
			return err
		}
		traces = append(traces, tr)
		sim, err := pipeline.Simulate(sched, costs[sched.Stages()])
		if err != nil {
			return err
		}
		formula := float64(ranks-1) / float64(micro+ranks-1)
		held := r.HeldPeakByRank()
		for k := 0; k < ranks; k++ {
			fmt.Printf("| %s | %d | %.3f | %.3f | %.3f | %d | %s | %.1f |\n", name, k, idle[k], sim.IdleFraction(k), formula, sim.PeakActivations[k], mib(held[k]), ms(wall)/float64(steps))
		}
	}
	fmt.Printf("\nWhere each rank's step time goes (traced, mean over the steps, fractions of the step's wall time): compute; waiting in receives; sends; the runner between actions; after the rank's last action. Replayed: the idle fraction Simulate gives for the same action lists with each pass costing its mean in this run, or each pass what it took, and free communication (what the order of passes alone costs). The last column is the idle the ranks' unequal work alone forces.\n\n")
	fmt.Printf("| schedule | rank | step ms | passes | mean pass ms | compute | recv wait | of it, delivery | send | between actions | after last | idle, replayed (mean costs) | idle, replayed (each pass as traced) | 1 − compute / busiest rank's compute |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range traces {
		fmt.Print(t)
	}
	return nil
}

// timelines sums the traced steps of one schedule.
type timelines struct {
	steps int
	wall  time.Duration
	// per rank
	compute, recv, send, between, after []time.Duration
	passes                              []int
	// per stage and pass kind: time and count, for the replay
	passTime  map[[2]int]time.Duration
	passCount map[[2]int]int
	// per rank: delivery latency summed over its receives; idle time of
	// the exact replay (each pass its traced duration, free messages)
	latency, exact []time.Duration
}

// replayExact replays one traced step: every compute action takes the
// time it took, in the order each rank ran it, and a message is there the
// moment its send begins (no delivery cost). It returns each rank's idle
// time in that replay (its makespan less the rank's compute).
func replayExact(trace [][]pipeline.TraceEvent) []time.Duration {
	n := len(trace)
	clock := make([]time.Duration, n)
	busy := make([]time.Duration, n)
	pc := make([]int, n)
	sent := map[pipeline.MsgKey]time.Duration{}
	for {
		progress, done := false, true
		for r := 0; r < n; r++ {
			for pc[r] < len(trace[r]) {
				e := trace[r][pc[r]]
				a := e.Action
				switch a.Kind {
				case pipeline.SendAct, pipeline.SendGrad:
					sent[a.MsgKey(0)] = clock[r]
				case pipeline.RecvAct, pipeline.RecvGrad:
					at, ok := sent[a.MsgKey(0)]
					if !ok {
						goto blocked
					}
					clock[r] = max(clock[r], at)
				default:
					clock[r] += e.End - e.Start
					busy[r] += e.End - e.Start
				}
				pc[r]++
				progress = true
			}
		blocked:
			done = done && pc[r] == len(trace[r])
		}
		if done || !progress {
			break
		}
	}
	var span time.Duration
	for _, c := range clock {
		span = max(span, c)
	}
	idle := make([]time.Duration, n)
	for r := range idle {
		idle[r] = span - busy[r]
	}
	return idle
}

func (t *timelines) add(trace [][]pipeline.TraceEvent, wall time.Duration) {
	if t.passTime == nil {
		n := len(trace)
		t.compute, t.recv, t.send, t.between, t.after = make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
		t.passes = make([]int, n)
		t.passTime, t.passCount = map[[2]int]time.Duration{}, map[[2]int]int{}
		t.latency, t.exact = make([]time.Duration, n), make([]time.Duration, n)
	}
	t.steps++
	t.wall += wall
	// delivery: from the end of a send to the end of its receive, when
	// the receive was already waiting (else from the receive's start)
	sentAt := map[pipeline.MsgKey]time.Duration{}
	for _, evs := range trace {
		for _, e := range evs {
			if k := e.Action.Kind; k == pipeline.SendAct || k == pipeline.SendGrad {
				sentAt[e.Action.MsgKey(0)] = e.End
			}
		}
	}
	for rank, evs := range trace {
		for _, e := range evs {
			if k := e.Action.Kind; k != pipeline.RecvAct && k != pipeline.RecvGrad {
				continue
			}
			if at, ok := sentAt[e.Action.MsgKey(0)]; ok {
				t.latency[rank] += e.End - max(at, e.Start)
			}
		}
	}
	for rank, d := range replayExact(trace) {
		t.exact[rank] += d
	}
	for rank, evs := range trace {
		var prev time.Duration
		for _, e := range evs {
			t.between[rank] += e.Start - prev
			prev = e.End
			d := e.End - e.Start
			switch k := e.Action.Kind; {
			case k.IsCompute():
				t.compute[rank] += d
				t.passes[rank]++
				key := [2]int{e.Action.Stage, int(k)}
				t.passTime[key] += d
				t.passCount[key]++
			case k == pipeline.RecvAct || k == pipeline.RecvGrad:
				t.recv[rank] += d
			default:
				t.send[rank] += d
			}
		}
		t.after[rank] += wall - prev
	}
}

// table prints the breakdown rows of one schedule, and replays its lists
// with this run's mean pass costs.
func (t *timelines) table(name string, sched *pipeline.Schedule) (string, error) {
	n := sched.Stages()
	c := pipeline.Costs{Forward: make([]float64, n), BackwardInput: make([]float64, n), BackwardWeight: make([]float64, n)}
	mean := func(st int, k pipeline.Kind) float64 {
		key := [2]int{st, int(k)}
		if t.passCount[key] == 0 {
			return 0
		}
		return ms(t.passTime[key]) / float64(t.passCount[key])
	}
	for st := 0; st < n; st++ {
		c.Forward[st] = mean(st, pipeline.Forward)
		if sched.SplitBackward() {
			c.BackwardInput[st], c.BackwardWeight[st] = mean(st, pipeline.BackwardInput), mean(st, pipeline.BackwardWeight)
		} else {
			c.BackwardInput[st] = mean(st, pipeline.Backward) // Backward costs BI + BW
		}
	}
	sim, err := pipeline.Simulate(sched, c)
	if err != nil {
		return "", err
	}
	wall := float64(t.wall)
	frac := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/wall) }
	var most time.Duration
	for _, c := range t.compute {
		most = max(most, c)
	}
	out := ""
	for rank := range t.compute {
		// the exact replay's idle over its own makespan (compute + idle)
		ex := float64(t.exact[rank]) / float64(t.exact[rank]+t.compute[rank])
		// the idle the ranks' unequal work alone makes: this rank's
		// compute against the busiest rank's
		imb := 1 - float64(t.compute[rank])/float64(most)
		out += fmt.Sprintf("| %s | %d | %.1f | %d | %.2f | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.3f |\n", name, rank, ms(t.wall)/float64(t.steps), t.passes[rank]/t.steps,
			ms(t.compute[rank])/float64(t.passes[rank]), frac(t.compute[rank]), frac(t.recv[rank]), frac(t.latency[rank]), frac(t.send[rank]), frac(t.between[rank]), frac(t.after[rank]), sim.IdleFraction(rank), ex, imb)
	}
	return out, nil
}

// writeModel saves the balanced model and random inputs, for measuring
// `onnxtrain train --pipeline-stages` on it (its loss is the output "loss").
func writeModel(dir string, layers, width, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := importer.Save(filepath.Join(dir, "model.onnx"), balanced(layers, width)); err != nil {
		return err
	}
	b := batches(1, n, width, 3)[0]
	return tensorio.WriteNPZ(filepath.Join(dir, "data.npz"), b.Inputs)
}

// measureFixture prints the plan's estimate and the measured time of each
// stage (one stage at a time, sequential schedule) for a committed model.
func measureFixture(name string, ranks, micro, batch, steps int, memOnly bool) error {
	ctx := context.Background()
	dir := filepath.Join("models", name)
	cases := map[string]struct {
		model, loss string
		inputs      []string
		labels      bool
	}{
		"vit_tiny":         {"vit_tiny_train.onnx", "cross_entropy", []string{"input"}, true},
		"transformer_loss": {"transformer_loss_train.onnx", "output:loss", []string{"x", "labels"}, false},
		"gpt":              {"gpt_small_train.onnx", "output:loss", []string{"tokens", "targets"}, false},
	}
	c, ok := cases[name]
	if !ok {
		return fmt.Errorf("-fixture %q: want vit_tiny, transformer_loss or gpt", name)
	}
	m, err := importer.Load(filepath.Join(dir, c.model))
	if err != nil {
		return err
	}
	lc, err := train.ParseLoss(c.loss)
	if err != nil {
		return err
	}
	sc := pipeline.StageConfig{}
	if lc.Kind == "output" {
		sc.LossOutput = lc.Output
	} else {
		sc.Loss = train.LossAppender(m, lc)
	}
	ds, err := data.OpenNPZ(filepath.Join(dir, "train_case.npz"), data.NPZOptions{NoLabels: !c.labels, Inputs: c.inputs})
	if err != nil {
		return err
	}
	var mbs []pipeline.Batch
	for i := 0; i < micro; i++ {
		idx := make([]int, batch)
		for k := range idx {
			idx[k] = (i*batch + k) % ds.Len()
		}
		in, labels, err := ds.Gather(0, idx)
		if err != nil {
			return err
		}
		mbs = append(mbs, pipeline.Batch{Inputs: in, Labels: labels})
	}
	fmt.Printf("%s, micro-batch %d, %d micro-batches per step, %d measured steps\n\n", name, batch, micro, steps)
	for _, c := range []struct {
		stages  int
		profile bool
	}{{ranks, false}, {ranks, true}, {2 * ranks, false}, {2 * ranks, true}} {
		if memOnly {
			break
		}
		stages := c.stages
		popts := pipeline.PartitionOptions{Stages: stages, BatchSize: batch}
		plan, err := pipeline.Partition(m, popts)
		if c.profile {
			fmt.Printf("--partition profile:\n")
			plan, err = pipeline.ProfilePartition(ctx, m, popts, sc, mbs, steps)
		}
		if err != nil {
			return err
		}
		seq, err := pipeline.Sequential(stages, micro, false)
		if err != nil {
			return err
		}
		// one worker: MinStageSeconds times the passes by thread CPU time
		r, err := pipeline.NewRunner(plan, seq, pipeline.RunnerConfig{Stage: sc, NewOptimizer: sgd, Workers: []int{1}})
		if err != nil {
			return err
		}
		// Each stage's median over runs of its least time in the run (a
		// step another process preempted only takes longer), as
		// --partition profile measures.
		mins, err := pipeline.MinStageSeconds(ctx, r, mbs, steps)
		if err != nil {
			return err
		}
		fmt.Printf("| stages | stage | nodes | est. ms F+B | measured ms F+B (CPU time, median of least, >= %d steps a run) | est. activations | kept per micro-batch |\n|---|---|---|---|---|---|---|\n", steps)
		var sum, worst, esum, eworst float64
		for s, p := range r.Profile() {
			st := plan.Stages[s]
			t := mins[s] * 1e3
			sum += t
			worst = max(worst, t)
			esum += st.EstSeconds
			eworst = max(eworst, st.EstSeconds)
			fmt.Printf("| %d | %d | %d | %.3f | %.3f | %s | %s |\n", stages, s, len(st.Nodes), st.EstSeconds*1e3, t, mib(st.ActivationBytes), mib(p.KeptBytes))
		}
		fmt.Printf("\nslowest stage above the mean: estimated %.1f%%, measured %.1f%%\n\n", (eworst/(esum/float64(stages))-1)*100, (worst/(sum/float64(stages))-1)*100)
	}
	for _, stages := range []int{ranks, 2 * ranks} {
		if err := measureStageMemory(ctx, m, sc, mbs, stages, batch, steps); err != nil {
			return err
		}
	}
	return nil
}

// measureStageMemory cuts m into stages for a 1F1B pipeline of that many
// ranks in one process, trains it with AdamW, and prints the plan's memory
// estimate per stage (refined from each stage's training graph) against
// what the stage measured: its parameters, gradient sums and AdamW state
// (the tensors' bytes), the most activations its micro-batches in flight
// kept at once, and the largest planned peak of one of its passes.
func measureStageMemory(ctx context.Context, m *graph.Model, sc pipeline.StageConfig, mbs []pipeline.Batch, stages, batch, steps int) error {
	sched, err := pipeline.New("1f1b", stages, len(mbs), 1)
	if err != nil {
		return err
	}
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: stages, BatchSize: batch, OptimizerSlots: 2,
		InFlight: func(st, _ int) int { return sched.InFlight(st) }})
	if err != nil {
		return err
	}
	model := make([]int64, stages) // the cost model's activations, before refining
	for s, st := range plan.Stages {
		model[s] = st.ActivationBytes
	}
	if err := plan.RefineMemory(sc); err != nil {
		return err
	}
	adamw := func(_ int, ps []*optim.Param) (optim.Optimizer, error) {
		return optim.NewAdamW(optim.AdamConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	}
	r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc, NewOptimizer: adamw})
	if err != nil {
		return err
	}
	for i := 0; i < steps; i++ {
		if _, err := r.Step(ctx, mbs); err != nil {
			return err
		}
	}
	fmt.Printf("1f1b, %d stages, AdamW: | stage | in flight | activations per micro-batch: cost model / from the stage graph / kept (measured) | held at once: estimated / measured | a pass's transient: estimated / largest planned peak | parameters + gradients + AdamW (measured) | est. memory / measured | off |\n|---|---|---|---|---|---|---|---|\n", stages)
	for s, p := range r.Profile() {
		st := plan.Stages[s]
		inflight := sched.InFlight(s)
		state := r.StateBytes(s)
		pass := r.PassPeakBytes(s)
		measured := state + p.HeldPeakBytes + pass
		fmt.Printf("| %d | %d | %s / %s / %s | %s / %s | %s / %s | %s | %s / %s | %+.1f%% |\n", s, inflight, mib(model[s]), mib(st.ActivationBytes), mib(p.KeptBytes),
			mib(st.ActivationBytes*int64(inflight)), mib(p.HeldPeakBytes), mib(st.PassBytes), mib(pass), mib(state), mib(st.EstMemoryBytes), mib(measured),
			(float64(st.EstMemoryBytes)/float64(measured)-1)*100)
	}
	fmt.Println()
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// runDevices times one optimizer step (forward, backward, SGD) of the
// balanced model cut into 2 stages under four placements, the placements
// taking turns step by step (so that a change of the machine's load falls
// on all of them), and prints each one's median and least step time.
func runDevices(micro, layers, width, batch, steps int) error {
	ctx := context.Background()
	m := balanced(layers, width)
	data := batches(micro, batch, width, 1)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: batch})
	if err != nil {
		return err
	}
	cores := runtime.GOMAXPROCS(0)
	type placement struct {
		name    string
		sched   func() (*pipeline.Schedule, error)
		devs    []string
		workers []int
	}
	pipe := func() (*pipeline.Schedule, error) { return pipeline.New("1f1b", 2, micro, 1) }
	seq := func() (*pipeline.Schedule, error) { return pipeline.Sequential(2, micro, false) }
	places := []placement{
		{"cpu:0,cpu:1 (1f1b, each device its share)", pipe, []string{"cpu:0", "cpu:1"}, nil},
		{"cpu:0,cpu:0 (1f1b, one device of all cores)", pipe, []string{"cpu:0", "cpu:0"}, nil},
		{fmt.Sprintf("cpu:0,cpu:1 with %d workers each (1f1b, cores oversubscribed)", cores), pipe, []string{"cpu:0", "cpu:1"}, []int{cores, cores}},
		{"no pipeline: both stages in turn on one device of all cores", seq, []string{"cpu:0"}, nil},
	}
	runners := make([]*pipeline.Runner, len(places))
	for i, p := range places {
		sched, err := p.sched()
		if err != nil {
			return err
		}
		r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"}, NewOptimizer: sgd, Devices: p.devs, Workers: p.workers})
		if err != nil {
			return err
		}
		if _, err := r.Step(ctx, data); err != nil { // compiles, warms up
			return err
		}
		runners[i] = r
	}
	times := make([][]float64, len(places))
	var losses [][]float64
	for step := 0; step < steps; step++ {
		row := make([]float64, len(places))
		for i, r := range runners {
			st, err := r.Step(ctx, data)
			if err != nil {
				return err
			}
			times[i] = append(times[i], ms(st.Wall))
			row[i] = st.Loss
		}
		losses = append(losses, row)
	}
	fmt.Printf("balanced model: %d blocks of %dx%d, micro-batch %d, %d micro-batches, 2 stages, GOMAXPROCS %d, %d steps each (taking turns)\n\n", layers, width, width, batch, micro, cores, steps)
	fmt.Printf("| placement | workers per rank | median step ms | least step ms | median over the first row's |\n|---|---|---|---|---|\n")
	var base float64
	for i, p := range places {
		v := append([]float64(nil), times[i]...)
		sort.Float64s(v)
		med := v[len(v)/2]
		if i == 0 {
			base = med
		}
		fmt.Printf("| %s | %v | %.1f | %.1f | %.2f |\n", p.name, runners[i].Workers, med, v[0], med/base)
	}
	fmt.Printf("\nlosses of the last step: %v\n", losses[len(losses)-1])
	return nil
}
