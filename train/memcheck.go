package train

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// Requests larger than the machine: a batch, an image size or a benchmark
// whose tensors cannot fit in memory is refused before anything is
// allocated, with an error naming the flag, instead of dying in the middle
// of an allocation with a runtime out-of-memory trace.

// MachineMemory is the memory this process may use, in bytes: the smaller
// of the machine's physical memory and the limit of its cgroup (a
// container's memory limit); 0 when neither can be read (not Linux).
func MachineMemory() int64 {
	var limit int64
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				fields := strings.Fields(rest)
				if len(fields) >= 1 {
					if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
						limit = kb * 1024
					}
				}
			}
		}
		f.Close()
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && (limit == 0 || v < limit) {
			limit = v
		}
	}
	return limit
}

// SizeProduct multiplies sizes without overflowing: a product beyond
// int64 saturates at math.MaxInt64 (larger than any machine).
func SizeProduct(factors ...int64) int64 {
	p := int64(1)
	for _, f := range factors {
		if f <= 0 {
			return 0
		}
		if p > math.MaxInt64/f {
			return math.MaxInt64
		}
		p *= f
	}
	return p
}

// CheckFits returns an error naming flag when need bytes (what the flag's
// value asks for: what) exceed MachineMemory; nil when they fit or the
// machine's memory is unknown.
func CheckFits(flag string, value any, need int64, what string) error {
	have := MachineMemory()
	if have <= 0 || need <= have {
		return nil
	}
	return fmt.Errorf("%s %v asks for %s of %s, more than this machine's memory (%s); use a smaller %s",
		flag, value, HumanBytes(need), what, HumanBytes(have), flag)
}

// HumanBytes formats a byte count with a binary unit.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), 0
	for v >= unit && u < 6 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[u-1])
}

// batchesHeld is how many batches a run holds at once: the one in use,
// the loader's prefetch queue (2) and the one its goroutine gathers.
const batchesHeld = 4

// checkImageSizeFits refuses an --image-size whose images, alone or in
// the batches a run holds, cannot fit in memory; before any is decoded.
func checkImageSizeFits(cfg Config) error {
	if cfg.ImageSize <= 0 {
		return nil
	}
	channels := int64(3)
	if cfg.Grayscale {
		channels = 1
	}
	one := SizeProduct(int64(cfg.ImageSize), int64(cfg.ImageSize), channels, 4)
	if err := CheckFits("--image-size", cfg.ImageSize, one, "float32 pixels per image"); err != nil {
		return err
	}
	need := SizeProduct(one, int64(cfg.BatchSize), batchesHeld)
	return CheckFits("--batch-size", cfg.BatchSize, need, fmt.Sprintf("input batches (%d held at once, images of %d px)", batchesHeld, cfg.ImageSize))
}

// checkBatchFits refuses a --batch-size whose input batches cannot fit
// in memory, measured on the data's first example.
func checkBatchFits(cfg Config, ds interface {
	Gather(epoch int, idx []int) (map[string]*graph.Tensor, *graph.Tensor, error)
}) error {
	inputs, labels, err := ds.Gather(0, []int{0})
	if err != nil {
		return nil // the loader reports it, with its context
	}
	var per int64
	for _, t := range inputs {
		per += int64(t.Size() * t.DType.Size())
	}
	if labels != nil {
		per += int64(labels.Size() * labels.DType.Size())
	}
	need := SizeProduct(per, int64(cfg.BatchSize), batchesHeld)
	return CheckFits("--batch-size", cfg.BatchSize, need, fmt.Sprintf("input batches (%d held at once, %s per example)", batchesHeld, HumanBytes(per)))
}

// checkStepFits refuses a --batch-size whose training step cannot fit in
// memory although its inputs do: activations are many times the inputs
// (a CNN's, tens of times). It plans the step's memory from the shapes of
// a batch of that size (Program.PlanFromShapes: activations, the kernels'
// scratch, the first step's recording), without running anything, and
// adds parameters, gradients, optimizer state and the input batches.
func checkStepFits(_ context.Context, cfg Config, _ LossConfig, ds data.Dataset, m *Model) error {
	have := MachineMemory()
	if have <= 0 || ds.Len() < 1 || m.Prog == nil {
		return nil
	}
	inputs, labels, err := ds.Gather(0, []int{0})
	if err != nil {
		return nil
	}
	var per int64
	for _, t := range inputs {
		per += int64(t.Size() * t.DType.Size())
	}
	if labels != nil {
		per += int64(labels.Size() * labels.DType.Size())
	}
	held := SizeProduct(per, int64(cfg.BatchSize), batchesHeld)
	var weights, trainable int64
	for _, p := range m.Prog.Params {
		weights += int64(p.Value.Size() * p.Value.DType.Size())
		trainable += int64(p.Value.Size() * 4)
	}
	for _, t := range m.Prog.Buffers {
		weights += int64(t.Size() * t.DType.Size())
	}
	// The step's memory planned from the batch's shapes (estimate_shapes.go):
	// nothing runs and nothing of the batch's size is allocated.
	shapes := map[string][]int{}
	for name, t := range inputs {
		shapes[name] = batchOf(t.Shape, cfg.BatchSize)
	}
	var labelShape []int
	if labels != nil {
		labelShape = batchOf(labels.Shape, cfg.BatchSize)
	}
	plan, err := m.Prog.PlanFromShapes(shapes, labelShape)
	if err != nil || len(plan.Unsized) > 0 {
		return nil // a backend or a graph the shapes cannot plan: no check
	}
	acts := satAdd64(satAdd64(plan.PeakBytes, plan.ScratchBytes), max(0, plan.RecordingBytes-plan.PeakBytes))
	// The gradient sums, unless the update runs inside the step (then each
	// gradient is a value of the step's plan, counted in acts).
	state := trainable
	if m.Prog.cfg.FusedUpdate {
		state = 0
	}
	switch {
	case cfg.Optimizer == "adam" || cfg.Optimizer == "adamw":
		state += 2 * trainable
	case cfg.Momentum != 0:
		state += trainable
	}
	need := satAdd64(satAdd64(satAdd64(weights, state), acts), held)
	if need <= have {
		return nil
	}
	return fmt.Errorf("--batch-size %d needs about %s for a training step (activations %s, planned from the batch's shapes; weights, gradients and optimizer state %s; input batches %s), more than this machine's memory (%s); use a smaller --batch-size (with --grad-accum to keep the effective batch) or --recompute",
		cfg.BatchSize, HumanBytes(need), HumanBytes(acts), HumanBytes(weights+state), HumanBytes(held), HumanBytes(have))
}

func satAdd64(x, y int64) int64 {
	if s := x + y; s >= x {
		return s
	}
	return math.MaxInt64
}

// batchOf is shape with its first dimension (the batch) set to b.
func batchOf(shape []int, b int) []int {
	out := append([]int{}, shape...)
	if len(out) > 0 {
		out[0] = b
	}
	return out
}
