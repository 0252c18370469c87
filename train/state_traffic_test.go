package train

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
)

// TestTrainingStepMovesNoState: on the CPU, a single-process training step
// (gradient accumulation over two micro-batches, clipping, SGD with
// momentum or AdamW) moves no byte of parameters, gradients or optimizer
// state between the program and the host: the state API's counters stay
// at zero after the first step, the parameters, gradient sums and
// optimizer slots the host sees are the program's state buffers
// themselves, and training changes them.
func TestTrainingStepMovesNoState(t *testing.T) {
	for _, c := range []struct{ opt, slot string }{{"sgd", "momentum_buffer"}, {"adamw", "exp_avg_sq"}} {
		t.Run(c.opt, func(t *testing.T) {
			r := newZeroRank(t, nil, AcceleratorConfig{GradAccum: 2}, zeroMLP, zeroMLPData, c.opt, 2)
			prog := r.model.Prog
			require.True(t, prog.cfg.GradSums, "one process keeps gradient sums in the program")
			require.NoError(t, r.train(1, 1.0))
			first := prog.StateTraffic()
			before := paramValues(r.model)
			require.NoError(t, r.train(4, 1.0))
			assert.Equal(t, first, prog.StateTraffic(), "steps 2-4 moved state bytes")
			assert.Equal(t, backend.StateTraffic{}, prog.StateTraffic(), "no state byte moved at all")
			assert.NotEqual(t, before, paramValues(r.model), "the steps trained")

			st := prog.Executable().(backend.Stateful)
			sums, err := prog.GradSums()
			require.NoError(t, err)
			for i, p := range prog.Params {
				assert.Same(t, p.Value, st.HostState(p.Name), "%s: the host parameter is the state buffer", p.Name)
				assert.Same(t, sums[i], st.HostState(GradStateName(p.Name)), "%s: gradient sum", p.Name)
				assert.Same(t, sums[i], r.model.params[i].Grad, "%s: the optimizer reads the sum", p.Name)
				assert.NotNil(t, st.HostState(p.Name+"/"+c.slot), "%s: the optimizer's %s is program state", p.Name, c.slot)
			}
			assert.Equal(t, 4, r.acc.Step())
		})
	}
}
