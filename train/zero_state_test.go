package train

import (
	"context"
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// TestZeroStepMovesNoState: under ZeRO-1 and ZeRO-2 (2 and 3 in-process
// ranks, gradient accumulation, clipping), the optimizer step is a program
// over the training program's state: this rank's parameter slices and
// their reduced gradients are views of the parameters' buffers and of the
// gradient partition (the same memory), the optimizer's slots are program
// buffers of the slices' size, and no byte of state moves between the
// program and the host, from the first step on. Each rank's slots hold
// its own elements only: together the ranks hold each slot of every
// parameter once, and each at most ⌈Ψ/world⌉ elements of it.
func TestZeroStepMovesNoState(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks")
	for _, tc := range []struct {
		opt          string
		slots        []string
		world, stage int
	}{
		{"sgd", []string{"momentum_buffer"}, 2, 1},
		{"adamw", []string{"exp_avg", "exp_avg_sq"}, 3, 2},
		{"adamw", []string{"exp_avg", "exp_avg_sq"}, 2, 1},
		{"sgd", []string{"momentum_buffer"}, 3, 2},
	} {
		t.Run(fmt.Sprintf("%s/%dranks/zero%d", tc.opt, tc.world, tc.stage), func(t *testing.T) {
			groups := startTestGroups(t, tc.world)
			ranks := make([]*zeroRank, tc.world)
			for i, g := range groups {
				ranks[i] = newZeroRank(t, g, AcceleratorConfig{GradAccum: 2, Zero: tc.stage, BucketBytes: 4 << 10}, zeroMLP, zeroMLPData, tc.opt, 1)
			}
			onRanks(t, ranks, func(r *zeroRank) error { return r.train(1, 1.0) })
			first := make([]backend.StateTraffic, tc.world)
			before := make([][][]float32, tc.world)
			for i, r := range ranks {
				first[i] = r.model.Prog.StateTraffic()
				before[i] = paramValues(r.model)
			}
			onRanks(t, ranks, func(r *zeroRank) error { return r.train(4, 1.0) })

			slotElems := map[string]int{} // per slot key, over every rank
			total := 0
			for rank, r := range ranks {
				prog, z := r.model.Prog, r.model.zero
				require.NotNil(t, z)
				total = z.total
				assert.Equal(t, first[rank], prog.StateTraffic(), "rank %d: steps 2-4 moved state bytes", rank)
				assert.Equal(t, backend.StateTraffic{}, prog.StateTraffic(), "rank %d: no state byte moved at all", rank)
				assert.NotEqual(t, before[rank], paramValues(r.model), "rank %d: the steps trained", rank)
				assert.Equal(t, 4, r.acc.Step())
				assert.NotNil(t, z.clipNorm, "rank %d: the gradient norm is an op of a program", rank)

				st := prog.Executable().(backend.Stateful)
				part, err := prog.ZeroPartition()
				require.NoError(t, err)
				optState := r.opt.Inner.State()
				rankSlots := 0
				require.NotEmpty(t, z.views)
				for j, v := range z.views {
					p := r.model.params[z.viewOf[j]]
					pv, gv := st.HostState(ZeroParamView(v.Name)), st.HostState(ZeroGradView(v.Name))
					require.NotNil(t, pv, "rank %d: %s's slice is program state", rank, v.Name)
					require.NotNil(t, gv, "rank %d: %s's gradient slice is program state", rank, v.Name)
					assert.Equal(t, unsafe.Pointer(&p.Value.Float32s()[z.viewLo[j]]), unsafe.Pointer(&pv.Float32s()[0]),
						"rank %d: %s's slice is a view of the parameter's buffer", rank, v.Name)
					partStart := z.offs[z.viewOf[j]] + z.viewLo[j] - z.lo
					assert.Equal(t, unsafe.Pointer(&part.Float32s()[partStart]), unsafe.Pointer(&gv.Float32s()[0]),
						"rank %d: %s's gradient is a view of the partition", rank, v.Name)
					assert.Same(t, pv, v.Value, "rank %d: the optimizer steps the view", rank)
					assert.Same(t, gv, v.Grad, "rank %d: the optimizer reads the view", rank)
					for _, slot := range tc.slots {
						key := v.Name + "/" + slot
						buf := st.HostState(key)
						require.NotNil(t, buf, "rank %d: the optimizer's %s is program state", rank, key)
						assert.Equal(t, v.Value.Size(), buf.Size(), "rank %d: %s has the slice's size", rank, key)
						require.Contains(t, optState, key)
						assert.Equal(t, optState[key].Float32s(), buf.Float32s(), "rank %d: the optimizer's %s is the program's buffer", rank, key)
						slotElems[key] += buf.Size()
						rankSlots += buf.Size()
					}
				}
				mem, err := r.acc.ZeroMemory()
				require.NoError(t, err)
				assert.LessOrEqual(t, 4*int64(rankSlots), mem.Optimizer, "rank %d: ZeroMemory counts the slots", rank)
				assert.LessOrEqual(t, rankSlots, len(tc.slots)*((total+tc.world-1)/tc.world), "rank %d holds at most 1/world of the slots", rank)
			}
			sum := 0
			for _, p := range ranks[0].model.params {
				for _, slot := range tc.slots {
					assert.Equal(t, p.Value.Size(), slotElems[p.Name+"/"+slot], "%s/%s: the ranks hold every element once", p.Name, slot)
					sum += slotElems[p.Name+"/"+slot]
				}
			}
			assert.Equal(t, len(tc.slots)*total, sum)
		})
	}
}

// TestZeroClipGradValueIsAnOp: under ZeRO, ClipGradValue clamps this
// rank's reduced gradients by a ClipGradValue op over the gradient views,
// in place in the program's partition: every element ends up as
// min(max(g, -v), v) of its value before, and no state byte moves.
func TestZeroClipGradValueIsAnOp(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks")
	const clip = 0.002
	groups := startTestGroups(t, 2)
	ranks := make([]*zeroRank, 2)
	for i, g := range groups {
		ranks[i] = newZeroRank(t, g, AcceleratorConfig{Zero: 2, BucketBytes: 4 << 10}, zeroMLP, zeroMLPData, "sgd", 2)
	}
	clamped := make([]int, 2)
	onRanks(t, ranks, func(r *zeroRank) error {
		ctx := context.Background()
		for b, err := range r.loader.Epoch(ctx, 0) {
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
				part, err := r.model.Prog.ZeroPartition()
				if err != nil {
					return err
				}
				before := append([]float32(nil), part.Float32s()...)
				if err := r.acc.ClipGradValue(r.model, clip); err != nil {
					return err
				}
				for i, g := range before {
					want := min(max(g, -clip), clip)
					if got := part.Float32s()[i]; got != want {
						return fmt.Errorf("partition element %d: %v clipped to %v, want %v", i, g, got, want)
					}
					if want != g {
						clamped[r.acc.ProcessIndex()]++
					}
				}
				if err := r.opt.Step(); err != nil {
					return err
				}
				r.opt.ZeroGrad()
				return nil
			})
			if err != nil || r.acc.Step() >= 3 {
				return err
			}
		}
		return nil
	})
	for i, r := range ranks {
		assert.Positive(t, clamped[i], "rank %d: some gradients were clamped", i)
		assert.Equal(t, backend.StateTraffic{}, r.model.Prog.StateTraffic(), "rank %d moved state bytes", i)
		require.NotNil(t, r.model.zero.clipValue, "rank %d: the clip ran as a program", i)
	}
	assert.ErrorContains(t, ranks[0].acc.ClipGradValue(ranks[0].model, -1), "invalid clip value -1")
}

// TestZeroFP16MatchesReplicated: ZeRO-1 and ZeRO-2 with fp16 loss scaling
// (unscale and inf check as an UnscaleGradsSharded op over this rank's
// gradient views) train as replicated data parallel does: the same
// skipped steps (a first scale of 2^scaleExp makes the first steps
// overflow), gradient norms and parameters, on every rank, with no state
// byte moved.
func TestZeroFP16MatchesReplicated(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks")
	const steps, scaleExp = 6, 18
	for _, tc := range []struct {
		opt          string
		world, stage int
	}{{"adamw", 2, 1}, {"sgd", 3, 2}} {
		t.Run(fmt.Sprintf("%s/%dranks/zero%d", tc.opt, tc.world, tc.stage), func(t *testing.T) {
			run := func(stage int) ([][]float32, []float64, int) {
				groups := startTestGroups(t, tc.world)
				ranks := make([]*zeroRank, tc.world)
				for i, g := range groups {
					ranks[i] = newZeroRank(t, g, AcceleratorConfig{GradAccum: 2, Zero: stage, BucketBytes: 4 << 10, MixedPrecision: "fp16"}, zeroMLP, zeroMLPData, tc.opt, 1)
					ranks[i].acc.amp.scaler.scale = math.Ldexp(1, scaleExp)
				}
				onRanks(t, ranks, func(r *zeroRank) error { return r.train(steps, 1.0) })
				for i := 1; i < tc.world; i++ {
					require.Equal(t, paramValues(ranks[0].model), paramValues(ranks[i].model), "rank %d has rank 0's parameters", i)
					require.Equal(t, nanAsString(ranks[0].norms), nanAsString(ranks[i].norms), "rank %d has rank 0's norms", i)
					require.Equal(t, ranks[0].acc.SkippedSteps(), ranks[i].acc.SkippedSteps(), "rank %d skipped rank 0's steps", i)
				}
				if stage > 0 {
					for i, r := range ranks {
						assert.Equal(t, backend.StateTraffic{}, r.model.Prog.StateTraffic(), "rank %d moved state bytes", i)
						assert.NotNil(t, r.model.zero.unscale, "rank %d: the unscale ran as a program", i)
					}
				}
				return paramValues(ranks[0].model), ranks[0].norms, ranks[0].acc.SkippedSteps()
			}
			want, wantNorms, wantSkipped := run(0)
			got, gotNorms, gotSkipped := run(tc.stage)
			t.Logf("skipped %d of %d steps", wantSkipped, steps)
			require.Positive(t, wantSkipped, "some steps overflowed")
			require.Less(t, wantSkipped, steps, "some steps trained")
			assert.Equal(t, wantSkipped, gotSkipped, "ZeRO skipped the replicated run's steps")
			require.Len(t, gotNorms, len(wantNorms))
			for s := range wantNorms {
				if math.IsInf(wantNorms[s], 0) || math.IsNaN(wantNorms[s]) {
					assert.False(t, !math.IsInf(gotNorms[s], 0) && !math.IsNaN(gotNorms[s]), "step %d: ZeRO's norm %v, replicated %v", s+1, gotNorms[s], wantNorms[s])
					continue
				}
				assert.InDelta(t, wantNorms[s], gotNorms[s], 1e-5*wantNorms[s], "step %d norm", s+1)
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

// nanAsString formats xs so that NaNs compare equal.
func nanAsString(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// TestZeroLoadIntoSteppedProgram: loading a ZeRO checkpoint into ranks
// whose step programs already hold optimizer state (the slots are rebound
// and written into the program's buffers) resumes exactly: two more steps
// give the parameters the uninterrupted run had after them.
func TestZeroLoadIntoSteppedProgram(t *testing.T) {
	testutil.SkipShort(t, "trains on in-process ranks")
	dir := t.TempDir() + "/ckpt"
	groups := startTestGroups(t, 2)
	ranks := make([]*zeroRank, 2)
	for i, g := range groups {
		ranks[i] = newZeroRank(t, g, AcceleratorConfig{Zero: 1, BucketBytes: 4 << 10}, zeroMLP, zeroMLPData, "adamw", 2)
	}
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(2, 0) })
	onRanks(t, ranks, func(r *zeroRank) error { return r.acc.SaveState(dir) })
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(4, 0) })
	want := paramValues(ranks[0].model)
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(6, 0) }) // the slots move on
	onRanks(t, ranks, func(r *zeroRank) error { return r.acc.LoadState(dir) })
	for i, r := range ranks {
		require.Equal(t, 2, r.acc.Step(), "rank %d", i)
	}
	onRanks(t, ranks, func(r *zeroRank) error { return r.train(4, 0) })
	assert.Equal(t, want, paramValues(ranks[0].model), "the resumed steps 3-4 equal the uninterrupted ones")
	assert.Equal(t, want, paramValues(ranks[1].model))
	st := ranks[0].model.Prog.Executable().(backend.Stateful)
	for _, v := range ranks[0].model.zero.views {
		require.Contains(t, ranks[0].opt.Inner.State(), v.Name+"/exp_avg")
		assert.Equal(t, ranks[0].opt.Inner.State()[v.Name+"/exp_avg"].Float32s(), st.HostState(v.Name+"/exp_avg").Float32s(), "%s: the optimizer's slot is the program's buffer", v.Name)
	}
}
