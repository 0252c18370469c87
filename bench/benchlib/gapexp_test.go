//go:build linux

package benchlib

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

func threadFaults() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return ru.Minflt + ru.Majflt
}

type gapRow struct {
	op                  string
	calls               int
	wall, cpu           time.Duration
	bytes               float64
	faults              int64
	subIn, subOut, elts int64
	split, cold         int64 // split calls, and those that found no pool goroutine polling
	handed, reclaimed   int64
}

func countSub(ts []*graph.Tensor) (sub, n int64) {
	for _, t := range ts {
		if t == nil {
			continue
		}
		v, ok := t.Data.([]float32)
		if !ok {
			continue
		}
		for _, x := range v {
			b := math.Float32bits(x) & 0x7fffffff
			if b != 0 && b < 0x00800000 {
				sub++
			}
		}
		n += int64(len(v))
	}
	return
}

// BenchmarkGapExperiment prints, per op type of a training step (SGD with
// momentum, 3 timed steps after 1 warm-up), the kernels' wall time and the
// CPU time of the thread that runs the graph, the page faults it took, and
// how many float32 inputs and outputs are subnormal, the calls its kernels
// split over the worker pool, those that found no pool goroutine polling
// (kern.ColdHandoffs), the chunks handed out and how many of those the
// caller ran itself (kern.HandoffStats), leaving out each node's first
// ONNXTRAIN_GAP_SKIP calls (default 1: the recording run; 2 also leaves
// out the arena's first run). An experiment for docs/large-models.md
// ("Where the step-versus-isolated gap comes from", "The row ops and the
// shape ops on two threads"): a benchmark, so that only `go test -bench
// GapExperiment -benchtime 1x` runs it, on ONNXTRAIN_GAP_MODEL=path
// (default the committed vit_tiny; ONNXTRAIN_GAP_BATCH, ONNXTRAIN_GAP_LOSS,
// ONNXTRAIN_GAP_INTHIGH as bench's flags). At -cpu 1 the thread's CPU
// time is every kernel's; the pool's columns mean something at -cpu 2.
func BenchmarkGapExperiment(t *testing.B) {
	path, batch := os.Getenv("ONNXTRAIN_GAP_MODEL"), 0
	if path == "" {
		path, batch = "../../models/vit_tiny/vit_tiny_train.onnx", 64 // a committed model, when none is named
	}
	if b, err := strconv.Atoi(os.Getenv("ONNXTRAIN_GAP_BATCH")); err == nil {
		batch = b
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ih, _ := strconv.ParseInt(os.Getenv("ONNXTRAIN_GAP_INTHIGH"), 10, 64)
	rows := map[string]*gapRow{}
	seen := map[*graph.Node]int{}
	skip, _ := strconv.Atoi(os.Getenv("ONNXTRAIN_GAP_SKIP")) // calls per node left out (default 1: the recording run)
	skip = max(skip, 1)
	lastCPU, lastF := threadCPU(), threadFaults()
	lastS, lastH, lastR := kern.HandoffStats()
	lastCold := kern.ColdHandoffs()
	hook := func(n *graph.Node, in, out []*graph.Tensor, d time.Duration) {
		c, f := threadCPU(), threadFaults()
		sp, h, rc := kern.HandoffStats()
		cold := kern.ColdHandoffs()
		if seen[n] >= skip {
			r := rows[n.OpType]
			if r == nil {
				r = &gapRow{op: n.OpType}
				rows[n.OpType] = r
			}
			_, bytes := opWork(n, in, out)
			r.calls++
			r.wall += d
			r.cpu += c - lastCPU
			r.faults += f - lastF
			r.split += sp - lastS
			r.cold += cold - lastCold
			r.handed += h - lastH
			r.reclaimed += rc - lastR
			r.bytes += bytes
			si, ni := countSub(in)
			so, no := countSub(out)
			r.subIn += si
			r.subOut += so
			r.elts += ni + no
		}
		seen[n]++
		lastS, lastH, lastR = kern.HandoffStats()
		lastCold = kern.ColdHandoffs()
		lastCPU, lastF = threadCPU(), threadFaults()
	}
	ctx := backend.WithNodeCallTimer(context.Background(), hook)
	o := ModelOptions{Model: path, BatchSize: max(batch, 1), Steps: 3, Warmup: 1, Optimizer: "sgd", LR: 0.01, Momentum: 0.9,
		Loss: os.Getenv("ONNXTRAIN_GAP_LOSS"), IntHigh: ih}
	res, err := RunModel(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no kernel call was reported")
	}
	var list []*gapRow
	for _, r := range rows {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].cpu > list[j].cpu })
	fmt.Printf("model %s GOMAXPROCS=%d median step %.0f ms\n", path, runtime.GOMAXPROCS(0), res.MedianStepMS)
	fmt.Printf("%-28s %6s %10s %10s %8s %8s %8s %10s %10s %7s %7s %8s %8s\n", "op", "calls", "wall ms", "cpu ms", "GB/s wall", "GB/s cpu", "faults", "sub in", "sub out", "split", "cold", "handed", "reclaim")
	for _, r := range list {
		if r.cpu < time.Millisecond {
			continue
		}
		fmt.Printf("%-28s %6d %10.1f %10.1f %8.2f %8.2f %8d %10d %10d %7d %7d %8d %8d\n", r.op, r.calls, ms(r.wall), ms(r.cpu),
			r.bytes/r.wall.Seconds()/1e9, r.bytes/r.cpu.Seconds()/1e9, r.faults, r.subIn, r.subOut, r.split, r.cold, r.handed, r.reclaimed)
	}
}
