package pipeline_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// startGroups forms a process group of n ranks over loopback TCP, one
// goroutine per rank (each as a separate process would).
func startGroups(t *testing.T, n int) []*distrib.Group {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	groups := make([]*distrib.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cfg := distrib.Config{Rank: r, WorldSize: n, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 30 * time.Second}
		if r == 0 {
			cfg.Listener = l
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[cfg.Rank], errs[cfg.Rank] = distrib.Init(context.Background(), cfg)
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

// onRanks runs f for every rank at once, as the processes of a job would.
func onRanks(n int, f func(rank int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

// TestPipelineAcrossProcesses: each rank in its own process group member
// with only its stages, activations and gradients over TCP, losses
// broadcast from the last stage: per-step losses equal one process with
// --grad-accum M.
func TestPipelineAcrossProcesses(t *testing.T) {
	// (after the first step every process calls ReplanContext: zb1p and
	// zbv continue on lists planned for the pass times all of them
	// measured, the same on every rank, and the losses stay the same)
	const batch, accum, steps = 2, 4, 3
	for _, f := range fixtures {
		cfg := f.config(batch, accum, steps, "adamw")
		cfg.ClipGradNorm = 1
		want := reference(t, cfg)
		for _, c := range []struct {
			ranks    int
			schedule string
		}{{2, "1f1b"}, {2, "zbv"}, {2, "interleaved"}, {4, "zb1p"}} {
			t.Run(fmt.Sprintf("%s/p%d/%s", f.name, c.ranks, c.schedule), func(t *testing.T) {
				groups := startGroups(t, c.ranks)
				m, sc := loadForStages(t, cfg)
				ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{NoLabels: !f.labels, Inputs: f.inputs})
				require.NoError(t, err)
				got := make([][]float64, c.ranks)
				plans := make([]string, c.ranks)
				errs := onRanks(c.ranks, func(rank int) error {
					ctx := context.Background()
					g := groups[rank]
					tr, err := pipeline.NewTCPTransport(ctx, g, "", 20*time.Second)
					if err != nil {
						return err
					}
					defer tr.Close()
					sched, err := pipeline.New(c.schedule, c.ranks, accum, 2)
					if err != nil {
						return err
					}
					plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: batch})
					if err != nil {
						return err
					}
					run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc, Transport: tr, Rank: rank, Group: g,
						RecvTimeout:  20 * time.Second,
						NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
					if err != nil {
						return err
					}
					for s, sp := range run.Stages {
						if (sp != nil) != (sched.RankOf(s) == rank) {
							return fmt.Errorf("rank %d holds stage %d: %v", rank, s, sp != nil)
						}
					}
					next := 0
					for step := 0; step < steps; step++ {
						micro := make([]pipeline.Batch, accum)
						for i := range micro {
							idx := []int{next % ds.Len(), (next + 1) % ds.Len()}
							next += 2
							in, labels, err := ds.Gather(0, idx)
							if err != nil {
								return err
							}
							micro[i] = pipeline.Batch{Inputs: in, Labels: labels}
						}
						if err := run.ForwardBackward(ctx, micro); err != nil {
							return err
						}
						if _, err := run.ClipGradNorm(cfg.ClipGradNorm); err != nil {
							return err
						}
						if err := run.Update(); err != nil {
							return err
						}
						got[rank] = append(got[rank], run.LastStats().Loss)
						if step == 0 {
							// the zero-bubble schedules replanned for the
							// pass times every process measured
							if err := run.ReplanContext(ctx); err != nil {
								return err
							}
							plans[rank] = run.Schedule.String()
						}
					}
					return nil
				})
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
				for r := range plans {
					assert.Equal(t, plans[0], plans[r], "rank %d planned other lists than rank 0", r)
				}
				for r := range got {
					require.Len(t, got[r], steps)
					for i := range want {
						assert.LessOrEqual(t, math.Abs(got[r][i]-want[i]), 1e-5*math.Abs(want[i]), "rank %d step %d: %.8f, one process %.8f", r, i+1, got[r][i], want[i])
					}
				}
			})
		}
	}
}

// TestPeerLost: a rank whose process goes away fails its neighbour's step
// at once with an error naming the lost rank and what was awaited.
func TestPeerLost(t *testing.T) {
	groups := startGroups(t, 2)
	m := tiedModel()
	lc, err := train.ParseLoss("cross_entropy")
	require.NoError(t, err)
	errs := onRanks(2, func(rank int) error {
		ctx := context.Background()
		tr, err := pipeline.NewTCPTransport(ctx, groups[rank], "", 10*time.Second)
		if err != nil {
			return err
		}
		if rank == 0 {
			tr.Close() // rank 0 "dies" before its first send
			return nil
		}
		defer tr.Close()
		sched, err := pipeline.New("1f1b", 2, 2, 0)
		if err != nil {
			return err
		}
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{SplitAt: []string{"act"}, BatchSize: 3})
		if err != nil {
			return err
		}
		run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{Loss: train.LossAppender(m, lc)},
			Transport: tr, Rank: 1, Group: groups[1], RecvTimeout: time.Minute})
		if err != nil {
			return err
		}
		x := graph.FromInt64([]int64{1, 2, 3}, 3)
		b := pipeline.Batch{Inputs: map[string]*graph.Tensor{"x": x}, Labels: x}
		return run.ForwardBackward(ctx, []pipeline.Batch{b, b})
	})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], pipeline.ErrPeerLost)
	assert.Contains(t, errs[1].Error(), "rank 1 (cpu:1), waiting for the activations of micro-batch 0, stage 1: pipeline: peer lost: rank 0 closed the connection")
}

// TestTensorEncoding: what crosses the wire comes back equal.
func TestTensorEncoding(t *testing.T) {
	in := map[string]*graph.Tensor{
		"a": graph.FromFloat32([]float32{1.5, -2, float32(math.Inf(1))}, 3),
		"b": graph.FromInt64([]int64{-7, 1 << 40}, 2, 1),
		"c": graph.FromFloat64([]float64{math.Pi}),
		"d": graph.FromBool([]bool{true, false}, 2),
	}
	// a float32 tensor of several chunks (moved 16384 values at a time)
	// and an empty one
	big := make([]float32, 5*9833) // 3 chunks and 13 values
	for i := range big {
		big[i] = float32(math.Sin(float64(i))) * 1e3
	}
	in["e"], in["f"] = graph.FromFloat32(big, 5, len(big)/5), graph.FromFloat32([]float32{}, 0)
	b, err := pipeline.EncodeTensors(in)
	require.NoError(t, err)
	out, err := pipeline.DecodeTensors(b)
	require.NoError(t, err)
	require.Len(t, out, 6)
	for k, v := range in {
		assert.True(t, graph.SameShape(v.Shape, out[k].Shape), k)
		assert.Equal(t, v.Data, out[k].Data, k)
	}
	_, err = pipeline.DecodeTensors(b[:len(b)-3])
	assert.Error(t, err)
}

// TestReplicatedPipelineAcrossProcesses: 4 processes as 2 replicas of a
// 2-rank pipeline (process = replica*2 + rank), each replica on its own M
// micro-batches of every window of 2M, gradients averaged across the
// replicas, clipping over the whole model: the losses of one process with
// --grad-accum 2M.
//
// With flushes 2, each replica runs its M micro-batches as two runs of the
// schedule (Runner.SetFlush, --grad-accum 2 with --micro-batches M/2):
// the same losses.
func TestReplicatedPipelineAcrossProcesses(t *testing.T) {
	const batch, accum, steps, R, S = 2, 2, 3, 2, 2
	for _, f := range fixtures {
		for _, c := range []struct {
			name    string
			flushes int
			zero    int
		}{{"1f1b", 1, 0}, {"zbv", 1, 0}, {"1f1b", 2, 0}, {"1f1b", 1, 1}, {"zbv", 2, 1}, {"1f1b", 1, 2}, {"zbv", 2, 2}} {
			name, flushes, zero := c.name, c.flushes, c.zero
			t.Run(fmt.Sprintf("%s/%s/flushes%d/zero%d", f.name, name, flushes, zero), func(t *testing.T) {
				cfg := f.config(batch, R*accum, steps, "adamw")
				cfg.ClipGradNorm = 1
				want := reference(t, cfg)
				groups := startGroups(t, R*S)
				m, sc := loadForStages(t, cfg)
				ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{NoLabels: !f.labels, Inputs: f.inputs})
				require.NoError(t, err)
				got := make([][]float64, R*S)
				states := make([]map[string]*graph.Tensor, R*S)
				kept := make([]map[string]bool, R*S) // the gradients each process keeps after a step
				all := make([]map[string]bool, R*S)
				errs := onRanks(R*S, func(proc int) error {
					ctx := context.Background()
					replica, rank := proc/S, proc%S
					tr, err := pipeline.NewTCPTransport(ctx, groups[proc], "", 20*time.Second)
					if err != nil {
						return err
					}
					defer tr.Close()
					micro := accum / flushes
					sched, err := pipeline.New(name, S, micro, 0)
					if err != nil {
						return err
					}
					plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: batch})
					if err != nil {
						return err
					}
					run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc, Transport: pipeline.ReplicaTransport(tr, replica*S),
						Rank: rank, Group: groups[proc], Replicas: R, Replica: replica, RecvTimeout: 20 * time.Second, Zero: zero,
						NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
					if err != nil {
						return err
					}
					next := 0
					for step := 0; step < steps; step++ {
						var window []pipeline.Batch
						for i := 0; i < R*accum; i++ {
							idx := []int{next % ds.Len(), (next + 1) % ds.Len()}
							next += 2
							in, labels, err := ds.Gather(0, idx)
							if err != nil {
								return err
							}
							window = append(window, pipeline.Batch{Inputs: in, Labels: labels})
						}
						mine := window[replica*accum : (replica+1)*accum]
						loss := 0.0
						for k := 0; k < flushes; k++ {
							run.SetFlush(k == 0, k == flushes-1, flushes)
							if err := run.ForwardBackward(ctx, mine[k*micro:(k+1)*micro]); err != nil {
								return err
							}
							loss += run.LastStats().Loss / float64(flushes)
						}
						if _, err := run.ClipGradNorm(cfg.ClipGradNorm); err != nil {
							return err
						}
						kept[proc], all[proc] = map[string]bool{}, map[string]bool{}
						for s := range plan.Stages {
							if sched.RankOf(s) != rank {
								continue
							}
							for _, p := range run.Params(s) {
								key := fmt.Sprintf("%d/%s", s, p.Name)
								all[proc][key] = true
								if p.Grad != nil {
									kept[proc][key] = true
								}
							}
						}
						if err := run.Update(); err != nil {
							return err
						}
						got[proc] = append(got[proc], loss)
					}
					states[proc] = run.OptimizerState()
					return nil
				})
				for r, err := range errs {
					require.NoError(t, err, "process %d", r)
				}
				for p := range got {
					for i := range want {
						assert.LessOrEqual(t, math.Abs(got[p][i]-want[i]), 1e-5*math.Abs(want[i]), "process %d step %d: %.8f, one process %.8f", p, i+1, got[p][i], want[i])
					}
				}
				// ZeRO: the replicas of a rank hold disjoint parts of its
				// stages' optimizer state, together all of it; without,
				// each holds all of it.
				for rank := 0; rank < S; rank++ {
					a, b := slotKeys(states[rank]), slotKeys(states[S+rank])
					require.NotEmpty(t, a)
					require.NotEmpty(t, b)
					if zero > 0 {
						for k := range a {
							assert.False(t, b[k], "rank %d: %s held by both replicas", rank, k)
						}
						assert.Greater(t, len(a)+len(b), max(len(a), len(b)))
					} else {
						assert.Equal(t, a, b, "rank %d", rank)
					}
					// ZeRO-2: each replica keeps the gradients of the
					// parameters it owns, the two together all of them;
					// otherwise each keeps all.
					ka, kb := kept[rank], kept[S+rank]
					require.NotEmpty(t, all[rank])
					if zero == 2 {
						for k := range ka {
							assert.False(t, kb[k], "rank %d: the gradient of %s kept by both replicas", rank, k)
						}
						assert.Equal(t, len(all[rank]), len(ka)+len(kb), "rank %d: every gradient kept by one replica", rank)
						assert.NotEmpty(t, ka)
						assert.NotEmpty(t, kb)
					} else {
						assert.Equal(t, all[rank], ka, "rank %d", rank)
						assert.Equal(t, all[rank], kb, "rank %d", rank)
					}
				}
			})
		}
	}
}

// slotKeys are the per-parameter entries ("<param>/<slot>") of an
// optimizer state.
func slotKeys(st map[string]*graph.Tensor) map[string]bool {
	out := map[string]bool{}
	for k := range st {
		if strings.Contains(k, "/") {
			out[k] = true
		}
	}
	return out
}

// TestTransportRecycle: a received float32 tensor given back (Recycle) is
// the storage of the next received tensor of its size, which still holds
// what was sent; small tensors are not kept.
func TestTransportRecycle(t *testing.T) {
	groups := startGroups(t, 2)
	trs := make([]*pipeline.TCPTransport, 2)
	for r, err := range onRanks(2, func(r int) error {
		var err error
		trs[r], err = pipeline.NewTCPTransport(context.Background(), groups[r], "", 10*time.Second)
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	defer trs[0].Close()
	defer trs[1].Close()
	ctx := context.Background()
	send := func(step int64, scale float32) map[string]*graph.Tensor {
		big, small := make([]float32, 3*16384+7), []float32{scale}
		for i := range big {
			big[i] = float32(i) * scale
		}
		k := pipeline.MsgKey{Step: step}
		require.NoError(t, trs[0].Send(ctx, 1, k, map[string]*graph.Tensor{"big": graph.FromFloat32(big, len(big)), "small": graph.FromFloat32(small, 1)}))
		msg, err := trs[1].Recv(ctx, 0, k)
		require.NoError(t, err)
		assert.Equal(t, big, msg["big"].Float32s(), "step %d", step)
		assert.Equal(t, small, msg["small"].Float32s(), "step %d", step)
		return msg
	}
	first := send(0, 1)
	bigPtr, smallPtr := &first["big"].Float32s()[0], &first["small"].Float32s()[0]
	trs[1].Recycle(first)
	second := send(1, -2)
	assert.Same(t, bigPtr, &second["big"].Float32s()[0], "the recycled buffer holds the next big tensor")
	assert.NotSame(t, smallPtr, &second["small"].Float32s()[0], "small tensors are not recycled")
	third := send(2, 3) // nothing recycled: new storage
	assert.NotSame(t, &second["big"].Float32s()[0], &third["big"].Float32s()[0])
}

// TestTiedWeightsZero2: the tied model (E read by both stages) as 2
// replicas × 2 ranks over loopback TCP with ZeRO-2 (the tied gradient
// summed over stages and replicas by one all-reduce, the others
// reduce-scattered), SGD with momentum, clipping to a norm of 0.1 that
// acts: every process's losses equal one in-process pipeline's over the 4
// micro-batches of each step, and both copies of E in every process end
// equal to that pipeline's.
func TestTiedWeightsZero2(t *testing.T) {
	const R, S, M, steps = 2, 2, 2, 4
	m := tiedModel()
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{SplitAt: []string{"act"}, BatchSize: 3})
	require.NoError(t, err)
	require.Equal(t, map[string][]int{"E": {0, 1}}, plan.Shared)
	batches := make([][]pipeline.Batch, steps) // R*M per step
	for s := range batches {
		for i := 0; i < R*M; i++ {
			x := graph.FromInt64([]int64{int64((s + i) % 7), int64((2*s + 3*i + 1) % 7), int64((5*s + i + 4) % 7)}, 3)
			y := graph.FromInt64([]int64{int64((s + 2*i) % 7), int64((s + i + 3) % 7), int64((3*s + 1) % 7)}, 3)
			batches[s] = append(batches[s], pipeline.Batch{Inputs: map[string]*graph.Tensor{"x": x}, Labels: y})
		}
	}
	lc, err := train.ParseLoss("cross_entropy")
	require.NoError(t, err)
	sc := pipeline.StageConfig{Loss: train.LossAppender(m, lc)}
	newOpt := func(_ int, ps []*optim.Param) (optim.Optimizer, error) {
		return optim.NewSGD(optim.SGDConfig{LR: 0.5, Momentum: 0.9})
	}
	const clip = 0.1
	// the reference: one pipeline over all R*M micro-batches
	ref, err := pipeline.NewRunner(plan, mustSchedule(t, "1f1b", S, R*M), pipeline.RunnerConfig{Stage: sc, NewOptimizer: newOpt})
	require.NoError(t, err)
	var want, norms []float64
	for _, mbs := range batches {
		require.NoError(t, ref.ForwardBackward(context.Background(), mbs))
		n, err := ref.ClipGradNorm(clip)
		require.NoError(t, err)
		require.NoError(t, ref.Update())
		want, norms = append(want, ref.LastStats().Loss), append(norms, n)
	}
	assert.Greater(t, norms[0], clip, "clipping acts")
	groups := startGroups(t, R*S)
	got := make([][]float64, R*S)
	es := make([][][]float32, R*S)
	errs := onRanks(R*S, func(proc int) error {
		ctx := context.Background()
		replica, rank := proc/S, proc%S
		tr, err := pipeline.NewTCPTransport(ctx, groups[proc], "", 20*time.Second)
		if err != nil {
			return err
		}
		defer tr.Close()
		run, err := pipeline.NewRunner(plan, mustSchedule(t, "1f1b", S, M), pipeline.RunnerConfig{Stage: sc, Transport: pipeline.ReplicaTransport(tr, replica*S),
			Rank: rank, Group: groups[proc], Replicas: R, Replica: replica, RecvTimeout: 20 * time.Second, Zero: 2, NewOptimizer: newOpt})
		if err != nil {
			return err
		}
		for _, mbs := range batches {
			if err := run.ForwardBackward(ctx, mbs[replica*M:(replica+1)*M]); err != nil {
				return err
			}
			if _, err := run.ClipGradNorm(clip); err != nil {
				return err
			}
			if err := run.Update(); err != nil {
				return err
			}
			got[proc] = append(got[proc], run.LastStats().Loss)
		}
		for _, sp := range run.Stages {
			if sp != nil {
				es[proc] = append(es[proc], stageParam(sp, "E"))
			}
		}
		return nil
	})
	for p, err := range errs {
		require.NoError(t, err, "process %d", p)
	}
	wantE := stageParam(ref.Stages[0], "E")
	assert.NotEqual(t, m.Graph.Initializers["E"].Float32s(), wantE, "E trains")
	for p := range got {
		for i := range want {
			assert.InDelta(t, want[i], got[p][i], 1e-5*math.Abs(want[i]), "process %d step %d", p, i+1)
		}
		require.Len(t, es[p], 1, "process %d holds one stage", p)
		for j := range wantE {
			assert.InDelta(t, wantE[j], es[p][0][j], 1e-5, "process %d: E[%d]", p, j)
		}
	}
}

func mustSchedule(t *testing.T, name string, ranks, micro int) *pipeline.Schedule {
	t.Helper()
	s, err := pipeline.New(name, ranks, micro, 0)
	require.NoError(t, err)
	return s
}

// stageParam is the values of a stage's copy of a parameter.
func stageParam(sp *pipeline.StageProgram, name string) []float32 {
	for _, p := range sp.Params {
		if p.Name == name {
			return p.Value.Float32s()
		}
	}
	return nil
}

// A received tensor's shape is checked before a recycled buffer is used
// for it: a shape with negative dimensions whose product matches a free
// buffer's length is an error, as without one, never a tensor.
func TestDecodeRecycledShapeChecked(t *testing.T) {
	const n = 1 << 12
	b, err := pipeline.EncodeTensors(map[string]*graph.Tensor{"g": graph.FromFloat32(make([]float32, n), 1, n)})
	require.NoError(t, err)
	free := func(k int) []float32 {
		if k == n {
			return make([]float32, n)
		}
		return nil
	}
	got, err := pipeline.DecodeTensorsInto(b, free)
	require.NoError(t, err)
	assert.Equal(t, []int{1, n}, got["g"].Shape)
	// the same bytes with the shape (1, n) rewritten to (-1, -n)
	bad := bytes.Clone(b)
	var one, neg1, want, negN [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	binary.LittleEndian.PutUint64(want[:], n)
	binary.LittleEndian.PutUint64(neg1[:], uint64(1<<64-1))
	binary.LittleEndian.PutUint64(negN[:], uint64(1<<64-n))
	i := bytes.Index(bad, append(one[:], want[:]...))
	require.GreaterOrEqual(t, i, 0, "the shape's bytes")
	copy(bad[i:], append(neg1[:], negN[:]...))
	_, err = pipeline.DecodeTensorsInto(bad, free)
	require.Error(t, err)
	_, err = pipeline.DecodeTensors(bad)
	require.Error(t, err)
}

// FuzzDecodeTensors: whatever the bytes, decoding returns tensors or an
// error, never a panic, with recycled storage or without.
func FuzzDecodeTensors(f *testing.F) {
	for _, m := range []map[string]*graph.Tensor{
		{"x": graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)},
		{"i": graph.FromInt64([]int64{7}, 1), "y": graph.FromFloat32(make([]float32, 1<<12), 64, 64)},
	} {
		b, err := pipeline.EncodeTensors(m)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = pipeline.DecodeTensors(b)
		_, _ = pipeline.DecodeTensorsInto(b, func(n int) []float32 {
			if n == 1<<12 {
				return make([]float32, n)
			}
			return nil
		})
	})
}

// onlyReader hides a reader's type, as a connection's is hidden.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// From a connection, a header that claims a tensor far larger than the
// bytes that follow is an error naming the tensor, with no more memory
// taken than what arrived; tensors above the chunk size arrive intact.
func TestStreamDecodeBoundsClaimedSizes(t *testing.T) {
	small, err := pipeline.EncodeTensors(map[string]*graph.Tensor{"act": graph.FromFloat32(make([]float32, 256), 16, 16)})
	require.NoError(t, err)
	// Patch the first dimension (after magic, key, count, name length,
	// name, dtype, rank) to claim 2^40 rows: 64 TiB.
	off := 25 + 4 + len("act") + 4 + 4
	require.Equal(t, uint64(16), binary.LittleEndian.Uint64(small[off:]))
	for _, rows := range []uint64{1 << 22, 1 << 40} { // 256 MiB, 64 TiB
		binary.LittleEndian.PutUint64(small[off:], rows)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = pipeline.DecodeStream(onlyReader{bytes.NewReader(small)}, 64<<20)
		runtime.ReadMemStats(&after)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `tensor "act"`)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(96<<20), "%d rows: allocated no more than a chunk", rows)
	}

	f32 := make([]float32, 3000)
	for i := range f32 {
		f32[i] = float32(i) * 0.5
	}
	i64 := make([]int64, 700)
	for i := range i64 {
		i64[i] = int64(i) - 350
	}
	f64 := make([]float64, 500)
	for i := range f64 {
		f64[i] = float64(i) / 3
	}
	msg := map[string]*graph.Tensor{"f": graph.FromFloat32(f32, 30, 100), "i": graph.FromInt64(i64, 700), "d": graph.FromFloat64(f64, 5, 100)}
	b, err := pipeline.EncodeTensors(msg)
	require.NoError(t, err)
	got, err := pipeline.DecodeStream(onlyReader{bytes.NewReader(b)}, 1000) // every tensor in several chunks
	require.NoError(t, err)
	assert.Equal(t, f32, got["f"].Float32s())
	assert.Equal(t, []int{30, 100}, got["f"].Shape)
	assert.Equal(t, i64, got["i"].Data)
	assert.Equal(t, f64, got["d"].Data)
}
