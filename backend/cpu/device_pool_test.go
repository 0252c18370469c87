package cpu

import (
	"context"
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func matType(r, c int) *graph.Type {
	return &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Value: int64(r), Known: true}, {Value: int64(c), Known: true}}}
}

// poolModel: y = Softmax(Relu(x·W) + x) over rows, with products and
// elementwise work large enough that the kernels fan out: x [rows, n],
// W [n, n].
func poolModel(rows, n int) *graph.Model {
	g := graph.NewGraph("pool")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: matType(rows, n)}}
	w := make([]float32, n*n)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*0.37)) / float32(n)
	}
	g.Initializers["W"] = graph.FromFloat32(w, n, n)
	g.Nodes = []*graph.Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"p"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"p"}, Outputs: []string{"r"}},
		{Name: "add", OpType: "Add", Inputs: []string{"r", "x"}, Outputs: []string{"s"}},
		{Name: "softmax", OpType: "Softmax", Inputs: []string{"s"}, Outputs: []string{"y"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
}

func poolInput(rows, n int) *graph.Tensor {
	x := make([]float32, rows*n)
	for i := range x {
		x[i] = float32(math.Cos(float64(i) * 0.011))
	}
	return graph.FromFloat32(x, rows, n)
}

func runPoolModel(t *testing.T, e *Executable, x *graph.Tensor) []float32 {
	t.Helper()
	out, err := e.Run(context.Background(), map[string]*graph.Tensor{"x": x})
	require.NoError(t, err)
	return append([]float32(nil), out["y"].Float32s()...)
}

// TestDeviceWorkerPools: executables compiled for two CPU devices of one
// worker each (backend.Tuning.Workers, Device) run concurrently in one
// process and compute bit for bit what one device computes with the
// process-wide pool at GOMAXPROCS=1; a device of two workers fans its
// kernels out on its own pool, and computes what the process-wide pool
// computes at GOMAXPROCS=2.
func TestDeviceWorkerPools(t *testing.T) {
	const rows, n = 256, 384
	m := poolModel(rows, n)
	x := poolInput(rows, n)
	compile := func(tu backend.Tuning) *Executable {
		exe, err := (&Backend{}).Compile(m, backend.CompileOptions{Tuning: tu})
		require.NoError(t, err)
		return exe.(*Executable)
	}
	old := runtime.GOMAXPROCS(1)
	want1 := runPoolModel(t, compile(backend.Tuning{}), x)
	runtime.GOMAXPROCS(2)
	want2 := runPoolModel(t, compile(backend.Tuning{}), x)
	defer runtime.GOMAXPROCS(old)

	devs := []*Executable{
		compile(backend.Tuning{Workers: 1, Device: "cpu:test0"}),
		compile(backend.Tuning{Workers: 1, Device: "cpu:test1"}),
	}
	got := make([][][]float32, len(devs))
	var wg sync.WaitGroup
	for d, e := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 5; rep++ {
				out, err := e.Run(context.Background(), map[string]*graph.Tensor{"x": x})
				if !assert.NoError(t, err) {
					return
				}
				got[d] = append(got[d], append([]float32(nil), out["y"].Float32s()...))
			}
		}()
	}
	wg.Wait()
	for d := range devs {
		require.Len(t, got[d], 5)
		for rep, y := range got[d] {
			require.Equal(t, want1, y, "device %d, run %d: not the one-worker result", d, rep)
		}
		assert.Zero(t, kern.DevicePool("cpu:test"+string(rune('0'+d)), 1).Tasks(), "a one-worker device never fans out")
	}
	assert.Nil(t, kern.Current(), "Run leaves the caller unbound")

	two := compile(backend.Tuning{Workers: 2, Device: "cpu:test2"})
	pool := kern.DevicePool("cpu:test2", 2)
	before := pool.Tasks()
	assert.Equal(t, want2, runPoolModel(t, two, x), "two workers: the GOMAXPROCS=2 result")
	assert.Greater(t, pool.Tasks(), before, "the kernels fanned out on the device's own pool")
}
