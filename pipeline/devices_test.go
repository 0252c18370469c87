package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// TestDevicesWithOneWorkerEach: the two ranks of a pipeline on cpu:0 and
// cpu:1 with one worker each (each device its own pool, the two running
// at the same time in one process) give, step for step, exactly the losses
// of the same pipeline with both ranks on one device of one worker, and
// those of one process with --grad-accum M to 1e-5.
func TestDevicesWithOneWorkerEach(t *testing.T) {
	const batch, accum, steps = 2, 4, 3
	for _, f := range fixtures {
		cfg := f.config(batch, accum, steps, "adamw")
		want := reference(t, cfg)
		two := pipelined(t, f, cfg, 2, "1f1b", func(rc *pipeline.RunnerConfig) {
			rc.Devices, rc.Workers = []string{"cpu:0", "cpu:1"}, []int{1, 1}
		})
		one := pipelined(t, f, cfg, 2, "1f1b", func(rc *pipeline.RunnerConfig) {
			rc.Devices, rc.Workers = []string{"cpu:0", "cpu:0"}, []int{1, 1}
		})
		require.Len(t, two, steps)
		assert.Equal(t, one, two, "%s: two one-worker devices against one", f.name)
		for i := range want {
			assert.LessOrEqual(t, math.Abs(two[i]-want[i]), 1e-5*math.Abs(want[i]), "%s step %d: devices %.8f, one process %.8f", f.name, i+1, two[i], want[i])
		}
		assert.NotEqual(t, two[0], two[steps-1], "the losses move")
	}
}

// mlpModel: layers blocks of MatMul [width, width] + Relu, the loss the
// mean square of the last, in the graph: products large enough at batch
// 64 that the kernels fan out.
func mlpModel(layers, width int) *graph.Model {
	g := graph.NewGraph("mlp")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: int64(width), Known: true}}}}}
	g.Outputs = []*graph.ValueInfo{{Name: "loss", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}}}
	h := "x"
	for l := 0; l < layers; l++ {
		w := make([]float32, width*width)
		for i := range w {
			w[i] = float32(math.Sin(float64(i*(l+3))*0.7)) * float32(math.Sqrt(3/float64(width)))
		}
		wn, mm, act := fmt.Sprintf("w%d", l), fmt.Sprintf("mm%d", l), fmt.Sprintf("relu%d", l)
		g.Initializers[wn] = graph.FromFloat32(w, width, width)
		g.Nodes = append(g.Nodes,
			&graph.Node{Name: mm, OpType: "MatMul", Inputs: []string{h, wn}, Outputs: []string{mm}},
			&graph.Node{Name: act, OpType: "Relu", Inputs: []string{mm}, Outputs: []string{act}})
		h = act
	}
	g.Nodes = append(g.Nodes,
		&graph.Node{Name: "sq", OpType: "Mul", Inputs: []string{h, h}, Outputs: []string{"sq"}},
		&graph.Node{Name: "loss", OpType: "ReduceMean", Inputs: []string{"sq"}, Outputs: []string{"loss"},
			Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
}

// TestDevicePoolsRunTheStages: a stage's passes run on its device's own
// pool (their kernels fan out there), and two devices of two workers give
// the losses of one device of one worker to 1e-5.
func TestDevicePoolsRunTheStages(t *testing.T) {
	const batch, width, micro = 64, 256, 2
	m := mlpModel(4, width)
	sched, err := pipeline.New("1f1b", 2, micro, 1)
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: batch})
	require.NoError(t, err)
	data := make([]pipeline.Batch, micro)
	for i := range data {
		x := make([]float32, batch*width)
		for k := range x {
			x[k] = float32(math.Cos(float64(k+i*7919) * 0.013))
		}
		data[i] = pipeline.Batch{Inputs: map[string]*graph.Tensor{"x": graph.FromFloat32(x, batch, width)}}
	}
	losses := func(devs []string, workers []int) []float64 {
		r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"}, Devices: devs, Workers: workers,
			NewOptimizer: func(int, []*optim.Param) (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.05}) }})
		require.NoError(t, err)
		require.Equal(t, workers, r.Workers)
		var out []float64
		for step := 0; step < 3; step++ {
			st, err := r.Step(context.Background(), data)
			require.NoError(t, err)
			out = append(out, st.Loss)
		}
		return out
	}
	want := losses([]string{"cpu:pooltest", "cpu:pooltest"}, []int{1, 1})
	p0, p1 := kern.DevicePool("cpu:pooltest0", 2), kern.DevicePool("cpu:pooltest1", 2)
	b0, b1 := p0.Tasks(), p1.Tasks()
	got := losses([]string{"cpu:pooltest0", "cpu:pooltest1"}, []int{2, 2})
	assert.Greater(t, p0.Tasks(), b0, "stage 0's kernels on cpu:pooltest0's pool")
	assert.Greater(t, p1.Tasks(), b1, "stage 1's kernels on cpu:pooltest1's pool")
	assert.Zero(t, kern.DevicePool("cpu:pooltest", 1).Tasks(), "a one-worker device never fans out")
	assert.Nil(t, kern.Current())
	for i := range want {
		assert.InDelta(t, want[i], got[i], 1e-5*math.Abs(want[i]), "step %d", i+1)
	}
	assert.NotEqual(t, want[0], want[2], "the losses move")
}

// TestDeviceWorkerShares: without worker counts, the distinct devices
// share the cores evenly; ranks on one device share its pool.
func TestDeviceWorkerShares(t *testing.T) {
	for _, c := range []struct {
		devs  []string
		given []int
		cores int
		want  []int
		err   string
	}{
		{devs: []string{"cpu:0", "cpu:1"}, cores: 2, want: []int{1, 1}},
		{devs: []string{"cpu:0", "cpu:0"}, cores: 2, want: []int{2, 2}},
		{devs: []string{"cpu:0", "cpu:1"}, cores: 5, want: []int{3, 2}},
		{devs: []string{"cpu:0", "cpu:1", "cpu:2", "cpu:3"}, cores: 2, want: []int{1, 1, 1, 1}},
		{devs: []string{"cpu:0", "cpu:1"}, given: []int{2, 0}, cores: 2, want: []int{2, 1}},
		{devs: []string{"cpu:0", "cpu:0"}, given: []int{1, 2}, cores: 2, err: "device cpu:0 given 1 workers for one rank and 2"},
		{devs: []string{"cpu:0", "cpu:1"}, given: []int{1}, cores: 2, err: "1 worker counts for 2 ranks"},
		{devs: []string{"cpu:0", "cpu:1"}, given: []int{-1, 1}, cores: 2, err: "rank 0 (cpu:0): -1 workers"},
	} {
		got, err := pipeline.DeviceWorkers(c.devs, c.given, c.cores)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%v %v on %d cores", c.devs, c.given, c.cores)
	}
}

// TestDeviceWorkerCounts: a worker count written into a device name
// ("cpu:wc0=3") gives that device a pool of that many workers, whatever
// its share of the cores would be: the stages' kernels fan out on pools of
// 3 and 2 workers (the share on this machine would be GOMAXPROCS/2), the
// names lose the count, and the losses equal those of one one-worker
// device to 1e-5. Bad counts name the device.
func TestDeviceWorkerCounts(t *testing.T) {
	const batch, width, micro = 64, 256, 2
	m := mlpModel(4, width)
	sched, err := pipeline.New("1f1b", 2, micro, 1)
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: batch})
	require.NoError(t, err)
	data := make([]pipeline.Batch, micro)
	for i := range data {
		x := make([]float32, batch*width)
		for k := range x {
			x[k] = float32(math.Sin(float64(k+i*131) * 0.011))
		}
		data[i] = pipeline.Batch{Inputs: map[string]*graph.Tensor{"x": graph.FromFloat32(x, batch, width)}}
	}
	newRunner := func(devs []string, workers []int) (*pipeline.Runner, error) {
		return pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"}, Devices: devs, Workers: workers,
			NewOptimizer: func(int, []*optim.Param) (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.05}) }})
	}
	losses := func(r *pipeline.Runner) []float64 {
		var out []float64
		for step := 0; step < 3; step++ {
			st, err := r.Step(context.Background(), data)
			require.NoError(t, err)
			out = append(out, st.Loss)
		}
		return out
	}
	ref, err := newRunner([]string{"cpu:wcref", "cpu:wcref"}, []int{1, 1})
	require.NoError(t, err)
	want := losses(ref)
	p0, p1 := kern.DevicePool("cpu:wc0", 3), kern.DevicePool("cpu:wc1", 2)
	r, err := newRunner([]string{"cpu:wc0=3", "cpu:wc1=2"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []int{3, 2}, r.Workers)
	assert.Equal(t, []string{"cpu:wc0", "cpu:wc1"}, r.Devices)
	got := losses(r)
	assert.Positive(t, p0.Tasks(), "stage 0's kernels on cpu:wc0's 3-worker pool")
	assert.Positive(t, p1.Tasks(), "stage 1's kernels on cpu:wc1's 2-worker pool")
	for i := range want {
		assert.InDelta(t, want[i], got[i], 1e-5*math.Abs(want[i]), "step %d", i+1)
	}
	// a count in the name and an equal one in Workers agree; one rank
	// with a count, the other its share
	r, err = newRunner([]string{"cpu:wc2=2", "cpu:wc3"}, []int{2, 0})
	require.NoError(t, err)
	assert.Equal(t, 2, r.Workers[0])
	assert.GreaterOrEqual(t, r.Workers[1], 1)
	for _, c := range []struct {
		devs    []string
		workers []int
		err     string
	}{
		{[]string{"cpu:0=0", "cpu:1"}, nil, `device "cpu:0=0" (rank 0): the worker count after '=' must be a whole number of at least 1, got "0"`},
		{[]string{"cpu:0", "cpu:1=many"}, nil, `device "cpu:1=many" (rank 1)`},
		{[]string{"=2", "cpu:1"}, nil, `device "=2" (rank 0) has no name`},
		{[]string{"cpu:0=2", "cpu:1"}, []int{3, 0}, `device "cpu:0=2" (rank 0): 2 workers in its name, 3 in Workers`},
		{[]string{"cpu:0=2", "cpu:0=1"}, nil, "device cpu:0 given 2 workers for one rank and 1"},
	} {
		_, err := newRunner(c.devs, c.workers)
		assert.ErrorContains(t, err, c.err, "%v %v", c.devs, c.workers)
	}
}
