package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/graph"
)

// benchFlags are the flags of `onnxtrain bench`.
type benchFlags struct {
	model      benchlib.ModelOptions
	dims       []string
	gemmShape  string
	transA     bool
	transB     bool
	logFormat  string
	cpuProfile string
	memProfile string
	stream     bool
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench (--model MODEL.onnx | --gemm M,N,K) [flags]",
		Short: "Time training steps (or inference, or one GEMM) on random data",
		Long: `Time training steps of a model on a fixed random batch: the symbolic batch
dimension of the inputs becomes --batch-size, labels are random (classes in
[0, C) for cross_entropy, C being dimension 1 of the model output), and each
step is the compiled forward+backward pass plus an optimizer update, as
'onnxtrain train' runs them. --warmup steps run untimed, then --steps are
timed; the report gives the median, mean and 90th percentile step time,
samples per second and the process's peak resident memory (VmHWM).

--inference times the forward pass of the evaluation graph instead.
A training step reports optimizer_gbps: the bytes of parameters, gradients
and optimizer state the update reads and writes over the time of the
update's nodes inside the step.

--stream measures the machine's memory bandwidth instead (STREAM's triad,
a = b + s*c, on all cores; JSON: {"triad_gbps": ...}), the peer that
optimizer_gbps compares with.

--gemm M,N,K times one float32 product C = op(A)·op(B) (op(A) M×K, op(B)
K×N) and reports GFLOP/s, the median over --steps repetitions.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model.Model, "model", "", "ONNX model to benchmark (exported in training mode to time training)")
	fl.IntVar(&f.model.BatchSize, "batch-size", 32, "size of the symbolic batch dimension")
	fl.IntVar(&f.model.Steps, "steps", 20, "timed steps (GEMM: timed repetitions)")
	fl.IntVar(&f.model.Warmup, "warmup", 3, "untimed steps before timing")
	fl.StringVar(&f.model.Loss, "loss", "cross_entropy", "cross_entropy, mse, l1, bce_with_logits, or output:NAME (the graph computes its own loss)")
	fl.StringVar(&f.model.Optimizer, "optimizer", "sgd", "sgd, adam or adamw")
	fl.Float64Var(&f.model.LR, "lr", 0.01, "learning rate")
	fl.Float64Var(&f.model.Momentum, "momentum", 0, "SGD momentum")
	fl.StringArrayVar(&f.dims, "dim", nil, "size of a symbolic input dimension other than the batch, NAME=SIZE (repeatable)")
	fl.BoolVar(&f.model.Inference, "inference", false, "time the forward pass of the evaluation graph only")
	fl.BoolVar(&f.model.SeparateUpdate, "separate-update", false, "run the optimizer's update as its own program after the step's forward and backward Run, over gradient sums kept as state, instead of inside the step (the default, except with --mixed-precision fp16)")
	fl.BoolVar(&f.model.Recompute, "recompute", false, "recompute cheap activations and attention's probabilities in the backward pass instead of keeping them (less memory, more time)")
	fl.StringVar(&f.model.MixedPrecision, "mixed-precision", "no", "no, bf16 or fp16: time the training step under autocast (as onnxtrain train --mixed-precision)")
	fl.Int64Var(&f.model.Seed, "seed", 0, "seed for the random data and random ops")
	fl.Int64Var(&f.model.IntHigh, "int-high", 2, "integer inputs are random in [0, int-high)")
	fl.StringVar(&f.model.Backend, "backend", "cpu", "backend to run on")
	fl.StringVar(&f.gemmShape, "gemm", "", "time one float32 GEMM of shape M,N,K instead of a model")
	fl.BoolVar(&f.transA, "trans-a", false, "GEMM: A is stored transposed (K×M)")
	fl.BoolVar(&f.transB, "trans-b", false, "GEMM: B is stored transposed (N×K)")
	fl.StringVar(&f.logFormat, "log-format", "text", "text (for people) or json (one object on stdout)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed steps to this file (read it with go tool pprof)")
	fl.StringVar(&f.memProfile, "memprofile", "", "write a heap profile to this file at the end of the run (as of the last collection; read it with go tool pprof -sample_index=inuse_space)")
	fl.BoolVar(&f.stream, "stream", false, "measure the memory bandwidth (STREAM triad on all cores) instead of a model")
	fl.BoolVar(&f.model.OpProfile, "op-profile", false, "time every kernel call of the timed steps and report the time per op type (JSON: op_profile)")
	fl.BoolVar(&f.model.PeakLive, "peak-live", false, "list what the training step's memory plan holds at its fullest step, largest first (JSON: peak_live)")
	fl.BoolVar(&f.model.OpProfileByNode, "op-profile-by-node", false, "as --op-profile, per node instead of per op type")
	fl.BoolVar(&f.model.OpProfileRefs, "op-profile-refs", true, "with an op profile: measure the 2048³ GEMM and the triad before the warm-up steps and after the last timed step and print each op's rate as a fraction of them (JSON: op_profile_refs, of_gemm, of_triad; outside the timed steps and --cpuprofile)")
	fl.BoolVar(&f.model.OpProfileByShape, "op-profile-by-shape", false, "as --op-profile, with each op split by its operands' shapes and the attributes that choose its work (transposes, gradient, views, perm, axis)")
	return cmd
}

func runBench(cmd *cobra.Command, f *benchFlags) error {
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("--log-format: %q is not text or json", f.logFormat)
	}
	out := cmd.OutOrStdout()
	if f.stream {
		if f.gemmShape != "" || f.model.Model != "" {
			return fmt.Errorf("--stream excludes --model and --gemm")
		}
		reps := 10
		if cmd.Flags().Changed("steps") {
			reps = f.model.Steps
		}
		res, err := benchlib.RunStream(benchlib.StreamOptions{Reps: reps})
		if err != nil {
			return err
		}
		if f.logFormat == "json" {
			return writeJSON(out, res)
		}
		fmt.Fprintf(out, "stream triad: %.2f GB/s (best of %d, %d threads, arrays of %.0f MiB)\n", res.TriadGBps, reps, res.Threads, res.ArrayMiB)
		return nil
	}
	if f.gemmShape != "" {
		if f.model.Model != "" {
			return fmt.Errorf("--gemm and --model exclude each other")
		}
		if f.cpuProfile != "" {
			return fmt.Errorf("--cpuprofile applies to --model runs (profile GEMM with go test -bench -cpuprofile in backend/cpu/gemm)")
		}
		m, n, k, err := benchlib.ParseGemmShape(f.gemmShape)
		if err != nil {
			return err
		}
		if err := checkGemmFits(m, n, k); err != nil { // bench_fits.go
			return err
		}
		res, err := benchlib.RunGemm(benchlib.GemmOptions{M: m, N: n, K: k, TransA: f.transA, TransB: f.transB,
			Reps: f.model.Steps, Warmup: max(1, f.model.Warmup), Seed: f.model.Seed})
		if err != nil {
			return err
		}
		if f.logFormat == "json" {
			return writeJSON(out, res)
		}
		fmt.Fprintf(out, "gemm %dx%dx%d (op(A) %s, op(B) %s): %.1f GFLOP/s median (min %.1f, max %.1f) over %d repetitions of %d calls; %.3f ms per product\n",
			m, n, k, transName(f.transA), transName(f.transB), res.GFLOPS, res.MinGFLOPS, res.MaxGFLOPS, res.Reps, res.CallsPerRep, res.MedianMS)
		return nil
	}
	if f.transA || f.transB {
		return fmt.Errorf("--trans-a and --trans-b apply to --gemm")
	}
	if f.model.Model == "" {
		return fmt.Errorf("give --model MODEL.onnx (or --gemm M,N,K)")
	}
	dims, err := parseDims(f.dims)
	if err != nil {
		return err
	}
	opts := f.model
	opts.Dims = dims
	opts.Tuning = tuningOrDefault()
	opts.NoPushDownGather = noPushDownGather()
	opts.CheckModel = func(m *graph.Model) error { return checkBenchInputsFit(m, opts.BatchSize, dims) } // bench_fits.go
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pf.Close()
		opts.Profile = pf
	}
	res, err := benchlib.RunModel(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if f.memProfile != "" {
		if err := writeHeapProfile(f.memProfile); err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
	}
	if f.logFormat == "json" {
		return writeJSON(out, res)
	}
	fmt.Fprintf(out, "%s (%s, batch %d, %s): median %.2f ms/step, mean %.2f, p90 %.2f, min %.2f over %d steps after %d warm-up; %.1f samples/s\n",
		res.Model, res.Mode, res.BatchSize, res.Backend, res.MedianStepMS, res.MeanStepMS, res.P90StepMS, res.MinStepMS, res.Steps, res.Warmup, res.SamplesPerS)
	if res.Mode == "train" {
		fmt.Fprintf(out, "  forward+backward %.2f ms, optimizer (%s) %.2f ms (medians); %d parameters; loss %.5g -> %.5g\n",
			res.MedianForwardBackwardMS, res.Optimizer, res.MedianOptimizerMS, res.Parameters, res.FirstLoss, res.LastLoss)
		if res.OptimizerGBps > 0 {
			fmt.Fprintf(out, "  optimizer update %.2f GB/s (median; min %.2f, max %.2f) over %.1f MB per step; update nodes %.2f ms median, %.2f ms p90\n",
				res.OptimizerGBps, res.OptimizerGBpsMin, res.OptimizerGBpsMax, float64(res.OptimizerBytes)/1e6, res.MedianUpdateMS, res.P90UpdateMS)
		}
	}
	fmt.Fprintf(out, "  setup %s, peak RSS %.1f MiB, GOMAXPROCS %d\n",
		time.Duration(res.SetupMS*float64(time.Millisecond)).Round(time.Millisecond), float64(res.PeakRSSBytes)/(1<<20), res.GOMAXPROCS)
	if res.PlannedPeakBytes > 0 {
		rc := ""
		if res.Recompute {
			rc = " (with --recompute)"
		}
		if res.MixedPrecision != "" {
			rc += " (--mixed-precision " + res.MixedPrecision + ")"
		}
		fmt.Fprintf(out, "  planned peak of a step %.1f MiB%s\n", float64(res.PlannedPeakBytes)/(1<<20), rc)
	}
	if pl := res.PeakLive; pl != nil {
		fmt.Fprintf(out, "  memory plan's fullest step %d of %d (%s %s): %.1f MiB alive in %d allocations\n",
			pl.Step, pl.Steps, pl.Op, pl.Node, float64(pl.Bytes)/(1<<20), len(pl.Values))
		for _, v := range pl.Values {
			fmt.Fprintf(out, "    %9.2f MiB  steps %5d-%-5d %-22s %-40s %s (last read by %s)\n", float64(v.Bytes)/(1<<20), v.Born, v.Dies, v.Op, v.Node, v.Value, v.LastReader)
		}
	}
	if r := res.OpProfileRefs; r != nil {
		inc := ""
		if r.PeakRSSIncluded {
			inc = fmt.Sprintf("; the peak RSS includes their %d MiB", benchlib.ProfileRefsBytes>>20)
		}
		fmt.Fprintf(out, "  references before the warm-up and after the last timed step (%d samples): 2048³ GEMM %.1f GFLOP/s (%.1f-%.1f), triad %.1f GB/s (%.1f-%.1f)%s\n",
			r.Samples, r.GemmGFLOPS, r.GemmMin, r.GemmMax, r.TriadGBps, r.TriadMin, r.TriadMax, inc)
	}
	if len(res.OpProfile) > 0 {
		fmt.Fprintf(out, "  kernel time per step (wall, the calls in sequence; GFLOP/s of product ops, GB/s of inputs+outputs of the others; indented: the products inside a fused op, as its kernel timed them):\n")
		for _, t := range res.OpProfile {
			name := t.Op
			if t.Within != "" {
				name = "  " + name
			}
			rate := ""
			switch {
			case t.GFLOPS > 0:
				rate = fmt.Sprintf(" %8.1f GFLOP/s", t.GFLOPS)
			case t.GBPS > 0:
				rate = fmt.Sprintf(" %8.2f GB/s", t.GBPS)
			}
			switch {
			case bytesBound(t):
				rate += fmt.Sprintf("  %.2f of the GEMM (its bytes allow %.2f; %.2f of the triad)", t.OfGemm, t.Roofline, t.OfTriad)
			case t.OfGemm > 0:
				rate += fmt.Sprintf("  %.2f of the GEMM", t.OfGemm)
			case t.OfTriad > 0:
				rate += fmt.Sprintf("    %.2f of the triad", t.OfTriad)
			}
			fmt.Fprintf(out, "    %-28s %8.3f ms %5.1f%% %6.1f calls%s\n", name, t.MS, 100*t.Share, t.Calls, rate)
		}
		if res.OpProfileRefs != nil {
			rows := res.OpProfile
			if res.OpProfileShapes != nil {
				rows = res.OpProfileShapes // the bars hold per shape
			}
			printBelowRefs(out, rows)
		}
	}
	if f.cpuProfile != "" {
		fmt.Fprintf(out, "  CPU profile of the timed steps: %s (go tool pprof -top %s)\n", f.cpuProfile, f.cpuProfile)
	}
	return nil
}

// Issue 14's bars for the rows of an op profile: products at 0.85 of the
// 2048³ GEMM, memory-bound ops at half the triad. A product whose bytes at
// the triad cap it under 0.85 of the GEMM (its roofline: four rows against
// a whole weight) cannot reach that bar on any kernel; the summary holds
// it to the triad's, as a memory-bound op, and names its roofline. Rows
// under belowMinMS a step are left out of the summary (a scalar op, a
// product of one tiny weight: they are in the table).
const (
	gemmBar    = 0.85
	triadBar   = 0.5
	belowMinMS = 0.5
)

// printBelowRefs lists the rows of an op profile under the bars, or says
// that none is: the caller gives the rows by shape (a type's row averages
// shapes that run at different rates).
func printBelowRefs(out io.Writer, rows []benchlib.OpTime) {
	var products, membound []string
	for _, t := range rows {
		if t.MS < belowMinMS {
			continue
		}
		switch {
		case bytesBound(t):
			if t.OfTriad < triadBar {
				membound = append(membound, fmt.Sprintf("%s %.2f (a product whose bytes allow %.2f of the GEMM)", t.Op, t.OfTriad, t.Roofline))
			}
		case t.OfGemm > 0:
			if t.OfGemm < gemmBar {
				products = append(products, fmt.Sprintf("%s %.2f", t.Op, t.OfGemm))
			}
		case t.OfTriad > 0 && t.OfTriad < triadBar:
			membound = append(membound, fmt.Sprintf("%s %.2f", t.Op, t.OfTriad))
		}
	}
	list := func(v []string) string {
		if len(v) == 0 {
			return "none"
		}
		return strings.Join(v, ", ")
	}
	fmt.Fprintf(out, "  below %.2f of the GEMM (rows of %.1f ms a step or more; products whose bytes allow it): %s\n", gemmBar, belowMinMS, list(products))
	fmt.Fprintf(out, "  below %.2f of the triad (rows of %.1f ms a step or more; with the products whose bytes do not): %s\n", triadBar, belowMinMS, list(membound))
}

// bytesBound reports whether t is a product whose bytes at the triad cap
// it under the product bar (its roofline), which holds it to the triad's.
func bytesBound(t benchlib.OpTime) bool {
	return t.OfGemm > 0 && t.Roofline > 0 && t.Roofline < gemmBar
}

func transName(t bool) string {
	if t {
		return "transposed"
	}
	return "as stored"
}

// parseDims reads --dim NAME=SIZE values.
func parseDims(vals []string) (map[string]int64, error) {
	dims := map[string]int64{}
	for _, v := range vals {
		name, size, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--dim %q: want NAME=SIZE", v)
		}
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--dim %q: %q is not a positive size", v, size)
		}
		if _, dup := dims[name]; dup {
			return nil, fmt.Errorf("--dim %s given twice", name)
		}
		dims[name] = n
	}
	return dims, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// writeHeapProfile writes the heap profile (as of the last collection) to
// path.
func writeHeapProfile(path string) error {
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(pf); err != nil {
		pf.Close()
		return err
	}
	return pf.Close()
}
