package train

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// zeroMemoryChildEnv, set to a file, makes TestZeroMemoryChild measure one
// world size and ZeRO stage (zeroMemoryChildEnv_WORLD, _STAGE, _MODEL,
// _DATA) in a process of its own and write the figures there as JSON.
const zeroMemoryChildEnv = "ONNXTRAIN_ZERO_MEMORY_CHILD"

// zeroMemoryFigures are what measureZeroMemory returns, as a child reports them.
type zeroMemoryFigures struct {
	Heap, Reported, Stepped int64
	Line                    string
}

// TestZeroMemory checks ZeroMemory's report against what a rank holds and
// against what a process really allocates. Per rank: the parameters,
// gradients and optimizer state are the bytes the ZeRO formulas give
// (Adam's exp_avg and exp_avg_sq sharded from stage 1, the reduced
// gradients from stage 2), and the step program's memory plan holds the
// full-size gradient outputs at every stage, stage 2 included (the backward
// pass writes whole gradients before the reduce-scatter), which a per-rank
// total must count. Those checks run on the ViT fixture (its rank-0 lines
// are the table in docs/performance.md) and on a wide MLP.
//
// Measured: the live heap (after GC) that all ranks of a world hold after
// two steps of the wide MLP (1.3M parameters, so that what ZeRO saves is
// megabytes, far above the heap's noise), each world size and stage in a
// fresh process of its own (so that nothing one stage leaves in the
// process, caches or a collector's timing, shows in another's figure),
// three processes each; what stage s saves against stage 0 is what the
// reported totals say it saves, within a tenth.
func TestZeroMemory(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks in child processes")
	var lines []string
	for _, world := range []int{2, 4} {
		for stage := 0; stage <= 2; stage++ {
			t.Run(fmt.Sprintf("vit/%d-ranks/zero-%d", world, stage), func(t *testing.T) {
				_, _, _, line := measureZeroMemory(t, zeroViT, zeroViTData, world, stage)
				lines = append(lines, line)
			})
		}
	}
	model, dataPath := writeWideMLP(t)
	for _, world := range []int{2, 4} {
		var median, reported [3]int64
		for stage := 0; stage <= 2; stage++ {
			var heaps []int64
			for rep := 0; rep < 3; rep++ {
				f := zeroMemoryChild(t, model, dataPath, world, stage)
				heaps = append(heaps, f.Heap)
				if rep == 0 {
					reported[stage] = f.Reported
					lines = append(lines, f.Line)
				} else {
					assert.Equal(t, reported[stage], f.Reported, "the report does not change from process to process")
				}
			}
			slices.Sort(heaps)
			median[stage] = heaps[1]
			t.Logf("wide MLP, %d ranks, zero %d: live heap of three processes %v", world, stage, heaps)
		}
		for stage := 1; stage <= 2; stage++ {
			saved, claimed := median[0]-median[stage], reported[0]-reported[stage]
			lines = append(lines, fmt.Sprintf("wide MLP, %d ranks, zero %d: live heap %d bytes (zero 0: %d); saves %d bytes measured, %d reported",
				world, stage, median[stage], median[0], saved, claimed))
			require.Positive(t, claimed, "zero %d reports a saving", stage)
			// A rank that kept full-size state would save nothing; one
			// that copied it needlessly at stage 0 would save more. The
			// rest (the optimizer's per-tensor records, the shard's views,
			// the collectives' buffers) is a few hundred kilobytes.
			assert.InDelta(t, float64(claimed), float64(saved), 0.1*float64(claimed),
				"%d ranks, zero %d: measured saving against the reported one", world, stage)
		}
		// Stage 2 shards the gradients on top of stage 1's optimizer state.
		assert.Greater(t, median[1]-median[2], (reported[1]-reported[2])/2, "%d ranks: zero 2 saves on top of zero 1", world)
	}
	for _, l := range lines {
		t.Log(l)
	}
	if p := os.Getenv("ONNXTRAIN_ZERO_MEMORY_REPORT"); p != "" {
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
}

// TestZeroMemoryChild is the child process of TestZeroMemory.
func TestZeroMemoryChild(t *testing.T) {
	testutil.SkipChild(t, zeroMemoryChildEnv)
	world, err := strconv.Atoi(os.Getenv(zeroMemoryChildEnv + "_WORLD"))
	require.NoError(t, err)
	stage, err := strconv.Atoi(os.Getenv(zeroMemoryChildEnv + "_STAGE"))
	require.NoError(t, err)
	var f zeroMemoryFigures
	f.Heap, f.Reported, f.Stepped, f.Line = measureZeroMemory(t, os.Getenv(zeroMemoryChildEnv+"_MODEL"), os.Getenv(zeroMemoryChildEnv+"_DATA"), world, stage)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(os.Getenv(zeroMemoryChildEnv), b, 0o644))
}

// zeroMemoryChild runs TestZeroMemoryChild in a new process and returns its
// figures; the child's own failures fail t with its output.
func zeroMemoryChild(t *testing.T, model, dataPath string, world, stage int) zeroMemoryFigures {
	t.Helper()
	out := filepath.Join(t.TempDir(), "figures.json")
	cmd := exec.Command(os.Args[0], "-test.run=^TestZeroMemoryChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), zeroMemoryChildEnv+"="+out,
		fmt.Sprintf("%s_WORLD=%d", zeroMemoryChildEnv, world), fmt.Sprintf("%s_STAGE=%d", zeroMemoryChildEnv, stage),
		zeroMemoryChildEnv+"_MODEL="+model, zeroMemoryChildEnv+"_DATA="+dataPath)
	text, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child for %d ranks at zero %d failed:\n%s", world, stage, text)
	b, err := os.ReadFile(out)
	require.NoError(t, err, "the child for %d ranks at zero %d wrote no figures:\n%s", world, stage, text)
	var f zeroMemoryFigures
	require.NoError(t, json.Unmarshal(b, &f))
	return f
}

// writeWideMLP writes a 256-1024-1024-10 ReLU MLP (Gemm layers, 1.3M
// parameters) and a batch file of 16 samples for it into a temporary folder.
func writeWideMLP(t *testing.T) (model, dataPath string) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(7, 8))
	rnd := func(shape ...int) *graph.Tensor {
		t := graph.Zeros(graph.Float32, shape...)
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(r.NormFloat64() * 0.03)
		}
		return t
	}
	g := graph.NewGraph("wide_mlp")
	g.Inputs = []*graph.ValueInfo{{Name: "input", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: 256, Known: true}}}}}
	sizes := []int{256, 1024, 1024, 10}
	in := "input"
	for l := 0; l+1 < len(sizes); l++ {
		w, b := fmt.Sprintf("fc%d.weight", l), fmt.Sprintf("fc%d.bias", l)
		g.Initializers[w], g.Initializers[b] = rnd(sizes[l+1], sizes[l]), rnd(sizes[l+1])
		out := fmt.Sprintf("h%d", l)
		g.Nodes = append(g.Nodes, &graph.Node{Name: "gemm" + fmt.Sprint(l), OpType: "Gemm", Inputs: []string{in, w, b}, Outputs: []string{out},
			Attrs: map[string]*graph.Attr{"transB": graph.IntAttr("transB", 1)}})
		in = out
		if l+2 < len(sizes) {
			g.Nodes = append(g.Nodes, &graph.Node{Name: "relu" + fmt.Sprint(l), OpType: "Relu", Inputs: []string{in}, Outputs: []string{in + "r"}})
			in += "r"
		}
	}
	g.Outputs = []*graph.ValueInfo{{Name: in, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: 10, Known: true}}}}}
	model = filepath.Join(dir, "wide_mlp.onnx")
	require.NoError(t, importer.Save(model, &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}))
	labels := make([]int64, 16)
	for i := range labels {
		labels[i] = int64(i % 10)
	}
	dataPath = filepath.Join(dir, "case.npz")
	require.NoError(t, tensorio.WriteNPZ(dataPath, map[string]*graph.Tensor{"input": rnd(16, 256), "labels": graph.FromInt64(labels, 16)}))
	return model, dataPath
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// measureZeroMemory trains model two steps (the first records the memory
// plan, the second runs from its arena) on world in-process ranks at a
// ZeRO stage, checks each rank's ZeroMemory against the formulas, and
// returns the live heap the ranks hold, the sum over ranks of the reported
// totals (ZeroMemory plus the plan's gradient outputs), the tensors the
// ranks' optimizers step (the parameters, or under ZeRO the slices of each
// rank's partition) and a line describing rank 0.
func measureZeroMemory(t *testing.T, model, dataPath string, world, stage int) (heap, reported, stepped int64, line string) {
	before := liveHeap()
	groups := startTestGroups(t, world)
	ranks := make([]*zeroRank, world)
	for i, g := range groups {
		ranks[i] = newZeroRank(t, g, AcceleratorConfig{Zero: stage}, model, dataPath, "adamw", 1)
	}
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(2, 0) })
	heap = liveHeap() - before
	psi := int64(ranks[0].model.zeroTotal())
	n := int64(world)
	part := (psi + n - 1) / n
	for _, r := range ranks {
		if z := r.model.zero; z != nil {
			stepped += int64(len(z.views))
		} else {
			stepped += int64(len(r.model.params))
		}
		mem, err := r.acc.ZeroMemory()
		require.NoError(t, err)
		assert.Equal(t, 4*psi, mem.Params)
		wantGrads, wantOpt := 4*psi, 8*psi
		switch stage {
		case 1: // the window's sums and the reduced partition
			wantGrads = 4*psi + 4*part
		case 2: // the reduced partition only
			wantGrads = 4 * part
		}
		if stage >= 1 {
			mine := int64(0)
			if z := r.model.zero; z != nil {
				mine = int64(z.hi - z.lo)
			}
			assert.InDelta(t, float64(part), float64(mine), float64(world), "stage %d: a rank's shard is 1/%d of the parameters", stage, world)
			wantOpt = 8 * mine
		}
		assert.Equal(t, wantGrads, mem.Grads, "stage %d, %d ranks: gradient bytes", stage, world)
		// Adam also keeps a step count per parameter and two scalars.
		assert.InDelta(t, float64(wantOpt), float64(mem.Optimizer), float64(8*len(r.model.params)+16), "stage %d, %d ranks: optimizer bytes", stage, world)

		// The gradient outputs of the step program, in its memory plan.
		st := r.model.Prog.trainExe.(interface{ MemoryStats() cpu.MemoryStats }).MemoryStats()
		require.True(t, st.Planned, "stage %d: the step runs from a memory plan (%s)", stage, st.Unplanned)
		planGrads := st.OutputBytes
		// The step adds each gradient into its sum or reduce-scatters it
		// into the partition (state, counted in Grads) itself: no
		// gradient is an output of the step. The step's whole planned
		// memory (activations and gradients) is held from step to step.
		assert.Less(t, planGrads, 4*psi, "stage %d: the gradients are not outputs of the step", stage)
		total := mem.Params + mem.Grads + mem.Optimizer + mem.Staging + st.PeakBytes
		reported += total
		if r.acc.ProcessIndex() == 0 {
			formula := 4*psi + 4*psi + 8*psi
			switch stage {
			case 1:
				formula = 4*psi + 4*psi + 8*psi/n
			case 2:
				formula = 4*psi + 4*psi/n + 8*psi/n
			}
			line = fmt.Sprintf("%s Ψ=%d, %d ranks, zero %d: rank 0 params %d + grads %d + optimizer %d = %d bytes (formula %d); staging %d; step's planned memory %d; total %d",
				filepath.Base(model), psi, world, stage, mem.Params, mem.Grads, mem.Optimizer, mem.Params+mem.Grads+mem.Optimizer, formula, mem.Staging, st.PeakBytes, total)
		}
	}
	assert.GreaterOrEqual(t, heap, reported, "the live heap holds at least what the ranks report")
	runtime.KeepAlive(ranks)
	return heap, reported, stepped, line
}

func (m *Model) zeroTotal() int {
	n := 0
	for _, p := range m.params {
		n += p.Value.Size()
	}
	return n
}
