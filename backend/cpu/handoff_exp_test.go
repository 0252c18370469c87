package cpu_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkColdHandoffs counts, per op type over two steady training steps
// of ONNXTRAIN_GAP_MODEL (ONNXTRAIN_GAP_BATCH, ONNXTRAIN_GAP_LOSS and
// ONNXTRAIN_GAP_INTHIGH as bench's flags; SGD with momentum), the kernel
// calls, the RunTask calls they split, how many of those found no pool
// goroutine polling (kern.ColdHandoffs: their chunks waited for a parked
// goroutine to wake), the chunks handed out and those the caller ran
// itself. An experiment for docs/large-models.md ("The row ops and the
// shape ops on two threads"): a benchmark, so that only `go test
// ./backend/cpu -run XXX -bench ColdHandoffs -benchtime 1x` runs it; it
// prints a table and checks nothing.
func BenchmarkColdHandoffs(t *testing.B) {
	path := os.Getenv("ONNXTRAIN_GAP_MODEL")
	if path == "" {
		t.Skip("set ONNXTRAIN_GAP_MODEL to the model to measure")
	}
	batch, _ := strconv.Atoi(os.Getenv("ONNXTRAIN_GAP_BATCH"))
	ih, _ := strconv.ParseInt(os.Getenv("ONNXTRAIN_GAP_INTHIGH"), 10, 64)
	type row struct {
		calls, split, cold, handed, reclaimed int64
		wall                                  time.Duration
	}
	rows := map[string]*row{}
	seen := map[*graph.Node]int{}
	s0, h0, r0 := kern.HandoffStats()
	c0 := kern.ColdHandoffs()
	hook := func(n *graph.Node, in, out []*graph.Tensor, d time.Duration) {
		s, h, r := kern.HandoffStats()
		c := kern.ColdHandoffs()
		if seen[n] >= 2 {
			x := rows[n.OpType]
			if x == nil {
				x = &row{}
				rows[n.OpType] = x
			}
			x.calls++
			x.split += s - s0
			x.cold += c - c0
			x.handed += h - h0
			x.reclaimed += r - r0
			x.wall += d
		}
		seen[n]++
		s0, h0, r0 = kern.HandoffStats()
		c0 = kern.ColdHandoffs()
	}
	ctx := backend.WithNodeCallTimer(context.Background(), hook)
	o := benchlib.ModelOptions{Model: path, BatchSize: max(batch, 1), Steps: 3, Warmup: 1, Optimizer: "sgd", LR: 0.01, Momentum: 0.9,
		Loss: os.Getenv("ONNXTRAIN_GAP_LOSS"), IntHigh: ih}
	res, err := benchlib.RunModel(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range rows {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return rows[names[i]].wall > rows[names[j]].wall })
	fmt.Printf("model %s median step %.0f ms\n", path, res.MedianStepMS)
	fmt.Printf("%-28s %6s %10s %7s %7s %8s %8s\n", "op", "calls", "wall ms", "split", "cold", "handed", "reclaim")
	var ts, tc int64
	for _, k := range names {
		x := rows[k]
		ts += x.split
		tc += x.cold
		if x.split == 0 {
			continue
		}
		fmt.Printf("%-28s %6d %10.1f %7d %7d %8d %8d\n", k, x.calls, float64(x.wall.Microseconds())/1e3, x.split, x.cold, x.handed, x.reclaimed)
	}
	fmt.Printf("total split %d cold %d\n", ts, tc)
}
