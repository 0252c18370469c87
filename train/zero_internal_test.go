package train

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train/data"
)

const (
	zeroMLP, zeroMLPData = "../models/mlp/mlp_train.onnx", "../models/mlp/train_case.npz"
	zeroViT, zeroViTData = "../models/vit_tiny/vit_tiny_train.onnx", "../models/vit_tiny/train_case.npz"
)

// startTestGroups makes a world of n in-process process groups on loopback.
func startTestGroups(t *testing.T, n int) []*distrib.Group {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	groups := make([]*distrib.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cfg := distrib.Config{Rank: r, WorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: time.Minute}
		if r == 0 {
			cfg.Listener = l
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[r], errs[r] = distrib.Init(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	return groups
}

// zeroRank is one process's training setup, in process.
type zeroRank struct {
	acc    *Accelerator
	model  *Model
	opt    *Optimizer
	loader *DataLoader
	norms  []float64
}

// newZeroRank prepares the model, optimizer and loader of one rank (g nil:
// one process) with the per-process batch size.
func newZeroRank(t *testing.T, g *distrib.Group, cfg AcceleratorConfig, model, dataPath, opt string, batch int) *zeroRank {
	t.Helper()
	cfg.Group = g
	acc, err := NewAccelerator(cfg)
	require.NoError(t, err)
	m, err := importer.Load(model)
	require.NoError(t, err)
	loss, err := ParseLoss("cross_entropy")
	require.NoError(t, err)
	pm, err := acc.PrepareModel(m, loss, ModelOptions{})
	require.NoError(t, err)
	c := DefaultConfig()
	c.Optimizer, c.LR, c.Momentum = opt, 0.05, 0.9
	if opt == "adamw" {
		c.LR, c.WeightDecay = 0.001, 0.01
	}
	inner, err := NewOptimizer(c, pm.Params())
	require.NoError(t, err)
	ds, err := OpenData(c, dataPath, true, pm.Prog)
	require.NoError(t, err)
	l, err := acc.PrepareDataLoader(ds, data.LoaderConfig{BatchSize: batch})
	require.NoError(t, err)
	return &zeroRank{acc: acc, model: pm, opt: acc.PrepareOptimizer(inner, pm), loader: l}
}

// train takes steps optimizer steps, clipping the gradient norm at clip.
func (r *zeroRank) train(steps int, clip float64) error {
	ctx := context.Background()
	for epoch := 0; r.acc.Step() < steps; epoch++ {
		for b, err := range r.loader.Epoch(ctx, epoch) {
			if err != nil {
				return err
			}
			err = r.acc.Accumulate(func() error {
				out, err := r.model.Forward(ctx, b)
				if err != nil {
					return err
				}
				if err := r.acc.Backward(out); err != nil {
					return err
				}
				if r.acc.SyncGradients() {
					n, err := r.acc.ClipGradNorm(r.model, clip)
					if err != nil {
						return err
					}
					r.norms = append(r.norms, n)
				}
				if err := r.opt.Step(); err != nil {
					return err
				}
				r.opt.ZeroGrad()
				return nil
			})
			if err != nil || r.acc.Step() >= steps {
				return err
			}
		}
	}
	return nil
}

// onRanks runs f on every rank at once and requires no error.
func onRanks(t *testing.T, ranks []*zeroRank, f func(r *zeroRank) error) {
	t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(r)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
}

func paramValues(m *Model) [][]float32 {
	var out [][]float32
	for _, p := range m.params {
		out = append(out, append([]float32(nil), p.Value.Float32s()...))
	}
	return out
}

// TestGradientsArriveInReverseOrder: the executor reports gradients from
// the last parameter backwards (the order the buckets are filled in), and
// before the backward pass has ended.
func TestGradientsArriveInReverseOrder(t *testing.T) {
	for _, c := range [][2]string{{zeroMLP, zeroMLPData}, {zeroViT, zeroViTData}} {
		r := newZeroRank(t, nil, AcceleratorConfig{}, c[0], c[1], "sgd", 2)
		for b, err := range r.loader.Epoch(context.Background(), 0) {
			require.NoError(t, err)
			var order []int
			index := r.model.gradIndex()
			ctx := backend.WithOutputFunc(context.Background(), func(name string, _ *graph.Tensor) {
				if i, ok := index[name]; ok {
					order = append(order, i)
				}
			})
			// The program of a data-parallel rank: gradients are outputs
			// (one process keeps them summed in its state instead).
			prog, err := Build(r.model.Prog.Model, ProgramConfig{Loss: r.model.Prog.cfg.Loss})
			require.NoError(t, err)
			_, err = prog.ForwardBackward(ctx, b.Inputs, b.Labels, 1)
			require.NoError(t, err)
			n := len(r.model.params)
			require.Len(t, order, n, c[0])
			pos := make([]int, n)
			for k, i := range order {
				pos[i] = k
			}
			assert.Less(t, pos[n-1], 2, "%s: the last parameter's gradient comes first or second: %v", c[0], order)
			assert.GreaterOrEqual(t, pos[0], n-4, "%s: the first parameter's gradient comes among the last four: %v", c[0], order)
			// Pairs of parameters whose gradients come in reverse order
			// (a layer's weight and bias may come either way round).
			reversed, pairs := 0, 0
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					pairs++
					if pos[j] < pos[i] {
						reversed++
					}
				}
			}
			assert.GreaterOrEqual(t, float64(reversed), 0.75*float64(pairs), "%s: order %v", c[0], order)
			break
		}
	}
}

// TestOverlapIsBitIdentical: with small buckets (so that several are
// reduced while backward runs), 2 processes give bit for bit the
// parameters of the same run reducing in Backward, with accumulation.
func TestOverlapIsBitIdentical(t *testing.T) {
	testutil.SkipShort(t, "trains on 2 in-process ranks")
	const steps = 3
	run := func(overlap bool) [][]float32 {
		groups := startTestGroups(t, 2)
		ranks := make([]*zeroRank, 2)
		for i, g := range groups {
			ranks[i] = newZeroRank(t, g, AcceleratorConfig{GradAccum: 2, BucketBytes: 16 << 10, NoOverlap: !overlap}, zeroViT, zeroViTData, "sgd", 2)
		}
		onRanks(t, ranks, func(r *zeroRank) error { return r.train(steps, 0) })
		assert.Equal(t, paramValues(ranks[0].model), paramValues(ranks[1].model), "the ranks agree")
		k := len(ranks[0].model.bucketLayout.members)
		require.Greater(t, k, 5, "several buckets")
		// The accumulate, start and wait nodes update the gradient sums in
		// place: the communicator reduced the state buffers themselves.
		assert.Equal(t, backend.StateTraffic{}, ranks[0].model.Prog.StateTraffic(), "no state copied")
		st := ranks[0].model.OverlapStats()
		assert.Equal(t, steps*k, st.Buckets)
		if overlap {
			assert.GreaterOrEqual(t, st.Early, steps*(k-2), "buckets started before backward ended")
		} else {
			assert.Zero(t, st.Early, "every bucket waits for the end of backward")
		}
		return paramValues(ranks[0].model)
	}
	with, without := run(true), run(false)
	require.Equal(t, len(without), len(with))
	for i := range with {
		require.Equal(t, without[i], with[i], "parameter %d", i)
	}
}

// TestOverlapErrorNamesStep: an all-reduce that fails in the step's
// collective ops surfaces from Forward, naming the step and the bucket.
func TestOverlapErrorNamesStep(t *testing.T) {
	groups := startTestGroups(t, 2)
	r := newZeroRank(t, groups[0], AcceleratorConfig{BucketBytes: 16 << 10}, zeroMLP, zeroMLPData, "sgd", 2)
	require.NotEmpty(t, r.model.Prog.Buckets(), "the step reduces its gradients")
	require.NoError(t, groups[0].Close()) // every collective now fails
	for b, err := range r.loader.Epoch(context.Background(), 0) {
		require.NoError(t, err)
		err = r.acc.Accumulate(func() error {
			out, err := r.model.Forward(context.Background(), b)
			if err != nil {
				return err
			}
			return r.acc.Backward(out)
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "gradient all-reduce at step 1 (bucket 1 of")
		break
	}
}

// TestZeroMatchesReplicated: ZeRO stages 1 and 2 on 2 and 3 in-process
// ranks give the parameters and gradient norms of plain data parallel
// (stage 0), for SGD with momentum and AdamW, with accumulation and
// clipping (the sharded norm is the norm of the whole gradients).
func TestZeroMatchesReplicated(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks")
	const steps = 3
	for _, tc := range []struct {
		opt   string
		world int
		stage int
	}{
		{"sgd", 2, 1}, {"adamw", 2, 2}, {"sgd", 3, 2}, {"adamw", 3, 1},
	} {
		t.Run(fmt.Sprintf("%s/%dranks/zero%d", tc.opt, tc.world, tc.stage), func(t *testing.T) {
			run := func(stage int) ([][]float32, []float64, *zeroRank) {
				groups := startTestGroups(t, tc.world)
				ranks := make([]*zeroRank, tc.world)
				for i, g := range groups {
					ranks[i] = newZeroRank(t, g, AcceleratorConfig{GradAccum: 2, Zero: stage, BucketBytes: 4 << 10}, zeroMLP, zeroMLPData, tc.opt, 1)
				}
				onRanks(t, ranks, func(r *zeroRank) error { return r.train(steps, 0.05) })
				for i := 1; i < tc.world; i++ {
					require.Equal(t, paramValues(ranks[0].model), paramValues(ranks[i].model), "rank %d has rank 0's parameters", i)
					require.Equal(t, ranks[0].norms, ranks[i].norms, "rank %d has rank 0's norms", i)
				}
				return paramValues(ranks[0].model), ranks[0].norms, ranks[0]
			}
			want, wantNorms, _ := run(0)
			got, gotNorms, r0 := run(tc.stage)
			require.NotNil(t, r0.model.zero)
			assert.Greater(t, r0.model.zero.total/r0.model.zero.chunk, tc.world, "several rounds per collective")
			require.Len(t, gotNorms, steps)
			for s := range wantNorms {
				assert.InDelta(t, wantNorms[s], gotNorms[s], 1e-6*wantNorms[s], "step %d norm", s+1)
				assert.Greater(t, wantNorms[s], 0.05, "step %d: the norm is clipped", s+1)
			}
			for i := range want {
				for j := range want[i] {
					if d := math.Abs(float64(got[i][j] - want[i][j])); d > 1e-6+1e-5*math.Abs(float64(want[i][j])) {
						t.Fatalf("parameter %d element %d: ZeRO %v, replicated %v", i, j, got[i][j], want[i][j])
					}
				}
			}
		})
	}
}

// TestZeroCheckpointReshards: optimizer state saved by 2 ranks under ZeRO-2
// is written as 2 shards, reassembles into whole tensors equal to each
// rank's slices, and loads on 3 ranks (ZeRO-1) and on 1 process, where the
// next step gives the same parameters as the uninterrupted run.
func TestZeroCheckpointReshards(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks")
	dir := filepath.Join(t.TempDir(), "ckpt")
	groups := startTestGroups(t, 2)
	ranks := make([]*zeroRank, 2)
	for i, g := range groups {
		ranks[i] = newZeroRank(t, g, AcceleratorConfig{Zero: 2, BucketBytes: 4 << 10}, zeroMLP, zeroMLPData, "adamw", 2)
	}
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(2, 0) })
	onRanks(t, ranks, func(r *zeroRank) error { return r.acc.SaveState(dir) })

	man, err := ReadManifest(dir)
	require.NoError(t, err)
	for r := 0; r < 2; r++ {
		assert.Contains(t, man.Files, ZeroShardFile(r, 2))
	}
	st, err := LoadState(dir)
	require.NoError(t, err)
	assert.Equal(t, 2, st.OptimizerShards)
	for _, r := range ranks {
		z := r.model.zero
		for key, slice := range r.opt.Inner.State() {
			i := strings.LastIndexByte(key, '/')
			if i < 0 {
				continue
			}
			full := st.Optimizer[key]
			require.NotNil(t, full, key)
			if !slice.DType.IsFloat() {
				assert.Equal(t, slice.Int64s(), full.Int64s(), key)
				continue
			}
			j := z.byName[key[:i]]
			lo := z.viewLo[j]
			assert.Equal(t, slice.Float32s(), full.Float32s()[lo:lo+slice.Size()], "%s on rank %d", key, z.rank)
		}
	}
	// The uninterrupted continuation, one more step.
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(3, 0) })
	want := paramValues(ranks[0].model)

	t.Run("on3", func(t *testing.T) {
		groups := startTestGroups(t, 3)
		more := make([]*zeroRank, 3)
		for i, g := range groups {
			more[i] = newZeroRank(t, g, AcceleratorConfig{Zero: 1}, zeroMLP, zeroMLPData, "adamw", 4)
			require.NoError(t, more[i].acc.LoadState(dir))
		}
		// A global batch of 4 per step on 2 ranks is the data of 3 ranks
		// only by luck; compare the restored state instead of stepping.
		for _, r := range more {
			z := r.model.zero
			for key, slice := range r.opt.Inner.State() {
				i := strings.LastIndexByte(key, '/')
				if i < 0 || !slice.DType.IsFloat() {
					continue
				}
				lo := z.viewLo[z.byName[key[:i]]]
				assert.Equal(t, st.Optimizer[key].Float32s()[lo:lo+slice.Size()], slice.Float32s(), "%s on rank %d of 3", key, z.rank)
			}
		}
	})
	t.Run("on1", func(t *testing.T) {
		one := newZeroRank(t, nil, AcceleratorConfig{Zero: 2}, zeroMLP, zeroMLPData, "adamw", 4)
		require.NoError(t, one.acc.LoadState(dir))
		pos := one.acc.Position()
		epoch, skip := pos.ResumePoint(one.loader.Len())
		one.acc.SkipFirstBatches(one.loader, skip)
		require.NoError(t, one.trainFrom(epoch, 3))
		got := paramValues(one.model)
		for i := range want {
			for j := range want[i] {
				require.InDelta(t, want[i][j], got[i][j], 1e-6+1e-5*math.Abs(float64(want[i][j])), "parameter %d element %d", i, j)
			}
		}
	})
}

// trainFrom is train starting at epoch (after a resume).
func (r *zeroRank) trainFrom(epoch, steps int) error {
	ctx := context.Background()
	for ; r.acc.Step() < steps; epoch++ {
		for b, err := range r.loader.Epoch(ctx, epoch) {
			if err != nil {
				return err
			}
			err = r.acc.Accumulate(func() error {
				out, err := r.model.Forward(ctx, b)
				if err != nil {
					return err
				}
				if err := r.acc.Backward(out); err != nil {
					return err
				}
				if err := r.opt.Step(); err != nil {
					return err
				}
				r.opt.ZeroGrad()
				return nil
			})
			if err != nil || r.acc.Step() >= steps {
				return err
			}
		}
	}
	return nil
}

// TestZeroShardErrors: a checkpoint whose shards are missing or do not
// cover the state fails to load with an error naming the problem.
func TestZeroShardErrors(t *testing.T) {
	opt := map[string]*graph.Tensor{}
	full := []float32{1, 2, 3, 4}
	data := map[string][]byte{
		ZeroShardFile(0, 2): shardFile(t, 0, map[string]zeroRange{"w": {0, 2, []int{2, 2}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(1, 2)}),
	}
	err := mergeZeroShards("ck", opt, data, 2)
	require.ErrorIs(t, err, ErrCheckpointIncomplete)
	assert.Contains(t, err.Error(), ZeroShardFile(1, 2))

	data[ZeroShardFile(1, 2)] = shardFile(t, 1, map[string]zeroRange{"w": {2, 3, []int{2, 2}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(3)})
	err = mergeZeroShards("ck", map[string]*graph.Tensor{}, data, 2)
	require.ErrorIs(t, err, ErrCheckpointCorrupt)
	assert.Contains(t, err.Error(), `cover 3 of the 4 elements of "w/exp_avg"`)

	data[ZeroShardFile(1, 2)] = shardFile(t, 1, map[string]zeroRange{"w": {2, 4, []int{2, 2}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(3)})
	err = mergeZeroShards("ck", map[string]*graph.Tensor{}, data, 2)
	require.ErrorIs(t, err, ErrCheckpointCorrupt)
	assert.Contains(t, err.Error(), "does not fit its range [2, 4)")

	data[ZeroShardFile(1, 2)] = shardFile(t, 1, map[string]zeroRange{"w": {2, 4, []int{2, 2}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(3, 4)})
	got := map[string]*graph.Tensor{}
	require.NoError(t, mergeZeroShards("ck", got, data, 2))
	assert.Equal(t, full, got["w/exp_avg"].Float32s())
	assert.Equal(t, []int{2, 2}, got["w/exp_avg"].Shape)
}

// shardFile is rank's shard file (of two) holding the entries ts over
// ranges, as encodeZeroShard writes it.
func shardFile(t testing.TB, rank int, ranges map[string]zeroRange, ts map[string]*graph.Tensor) []byte {
	b, err := encodeZeroShard(ts, ranges, rank, 2)
	require.NoError(t, err)
	return b
}

// TestZeroSaveFailureReachesEveryRank: when rank 0 cannot start a ZeRO
// checkpoint (the folder is not a checkpoint), every rank returns its
// error instead of waiting for the folder.
func TestZeroSaveFailureReachesEveryRank(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	groups := startTestGroups(t, 2)
	ranks := make([]*zeroRank, 2)
	for i, g := range groups {
		ranks[i] = newZeroRank(t, g, AcceleratorConfig{Zero: 1}, zeroMLP, zeroMLPData, "sgd", 2)
	}
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(1, 0) })
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.acc.SaveState(dir)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.Error(t, err, "rank %d", i)
		assert.Contains(t, err.Error(), "is not an onnxtrain checkpoint", "rank %d", i)
	}
	b, err := os.ReadFile(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "mine", string(b), "the folder is left alone")
}

// TestOverlapWithSyncBatchNorm: synchronised BatchNorm's all-reduces and
// the gradient buckets share the step's communicator, so the buckets are
// reduced while backward runs with --sync-batchnorm too (the host path
// could not), bit for bit as when every bucket waits for the end of the
// backward pass.
func TestOverlapWithSyncBatchNorm(t *testing.T) {
	testutil.SkipShort(t, "trains on 2 in-process ranks")
	const steps = 2
	run := func(overlap bool) [][]float32 {
		groups := startTestGroups(t, 2)
		ranks := make([]*zeroRank, 2)
		for i, g := range groups {
			ranks[i] = newZeroRank(t, g, AcceleratorConfig{GradAccum: 2, BucketBytes: 8 << 10, SyncBatchNorm: true, NoOverlap: !overlap},
				"../models/cifar_resnet/cifar_resnet_train.onnx", "../models/cifar_resnet/train_case.npz", "sgd", 2)
		}
		onRanks(t, ranks, func(r *zeroRank) error { return r.train(steps, 0) })
		assert.Equal(t, paramValues(ranks[0].model), paramValues(ranks[1].model), "the ranks agree")
		st := ranks[0].model.OverlapStats()
		k := len(ranks[0].model.Prog.Buckets())
		require.Greater(t, k, 3, "several buckets")
		assert.Equal(t, steps*k, st.Buckets)
		if overlap {
			assert.GreaterOrEqual(t, st.Early, steps*(k-2), "buckets started before backward ended")
		} else {
			assert.Zero(t, st.Early)
		}
		return paramValues(ranks[0].model)
	}
	with, without := run(true), run(false)
	require.Equal(t, len(without), len(with))
	for i := range with {
		require.Equal(t, without[i], with[i], "parameter %d", i)
	}
}
