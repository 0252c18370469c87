package pipeline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// TestTraceAndCostPlannedSchedule: a traced step records every action of
// every rank once, in its list's order, each span inside the step and
// after the previous one, every receive ending after its send began; and
// zbv planned for unequal pass costs (another order of the same passes) trains the transformer fixture to the same losses as zbv
// planned for unit costs (each stage's weight gradients still sum in
// micro-batch order).
func TestTraceAndCostPlannedSchedule(t *testing.T) {
	f := fixtures[1] // transformer_loss
	cfg := f.config(4, 4, 1, "sgd")
	m, sc := loadForStages(t, cfg)
	ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{Inputs: f.inputs, NoLabels: true})
	require.NoError(t, err)
	var micro []pipeline.Batch
	for i := 0; i < cfg.GradAccum; i++ {
		in, _, err := ds.Gather(0, []int{(2 * i) % ds.Len(), (2*i + 1) % ds.Len()})
		require.NoError(t, err)
		micro = append(micro, pipeline.Batch{Inputs: in})
	}
	newRunner := func(sched *pipeline.Schedule) *pipeline.Runner {
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: 2})
		require.NoError(t, err)
		r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc,
			NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
		require.NoError(t, err)
		return r
	}
	ctx := context.Background()
	unit, err := pipeline.New("zbv", 2, 4, 0)
	require.NoError(t, err)
	ru := newRunner(unit)
	st, err := ru.Step(ctx, micro)
	require.NoError(t, err)
	assert.Empty(t, ru.Trace(), "tracing is off")
	lossesUnit := []float64{st.Loss}

	// zbv planned for the balanced benchmark's pass costs (its first
	// stage has no input gradient): another order of the same passes
	c := pipeline.Costs{Forward: []float64{0.94, 0.94, 0.93, 1.05}, BackwardInput: []float64{0, 1.59, 1.59, 1.67}, BackwardWeight: []float64{2.30, 1.30, 1.22, 1.33}}
	planned, err := pipeline.NewWithCosts("zbv", 2, 4, 0, c)
	require.NoError(t, err)
	require.NotEqual(t, unit.String(), planned.String())
	_, err = pipeline.Simulate(planned, pipeline.Costs{})
	require.NoError(t, err, "%s", planned)
	rc := newRunner(planned)
	rc.SetTrace(true)
	var lossesPlanned []float64
	for step := 0; step < 2; step++ {
		st, err := rc.Step(ctx, micro)
		require.NoError(t, err)
		lossesPlanned = append(lossesPlanned, st.Loss)
		if step == 1 {
			break
		}
		st2, err := ru.Step(ctx, micro)
		require.NoError(t, err)
		lossesUnit = append(lossesUnit, st2.Loss)

		trace := rc.Trace()
		require.Len(t, trace, 2)
		sendStart := map[pipeline.MsgKey]int64{}
		for rank, evs := range trace {
			require.Len(t, evs, len(planned.Actions[rank]), "rank %d", rank)
			var prevEnd int64
			for i, e := range evs {
				assert.Equal(t, planned.Actions[rank][i], e.Action, "rank %d action %d", rank, i)
				assert.Equal(t, rank, e.Rank)
				assert.LessOrEqual(t, prevEnd, int64(e.Start), "rank %d action %d starts before the previous ended", rank, i)
				assert.LessOrEqual(t, e.Start, e.End)
				assert.LessOrEqual(t, e.End, st.Wall)
				prevEnd = int64(e.End)
				if k := e.Action.Kind; k == pipeline.SendAct || k == pipeline.SendGrad {
					sendStart[e.Action.MsgKey(0)] = int64(e.Start)
				}
			}
		}
		for rank, evs := range trace {
			for _, e := range evs {
				if k := e.Action.Kind; k != pipeline.RecvAct && k != pipeline.RecvGrad {
					continue
				}
				at, ok := sendStart[e.Action.MsgKey(0)]
				require.True(t, ok, "rank %d: %v has no send", rank, e.Action)
				assert.Less(t, at, int64(e.End), "rank %d: %v ends before its send began", rank, e.Action)
			}
		}
	}
	assert.Equal(t, lossesUnit, lossesPlanned)

	// Replan: the unit-planned runner replanned for the times it measured
	// runs a checked schedule and still steps as the other
	require.NoError(t, ru.Replan())
	_, err = pipeline.Simulate(ru.Schedule, pipeline.Costs{})
	require.NoError(t, err, "%s", ru.Schedule)
	a, err := ru.Step(ctx, micro)
	require.NoError(t, err)
	b, err := rc.Step(ctx, micro)
	require.NoError(t, err)
	assert.Equal(t, a.Loss, b.Loss)
	g, err := pipeline.New("1f1b", 2, 4, 0)
	require.NoError(t, err)
	rg := newRunner(g)
	require.NoError(t, rg.Replan())
	assert.Same(t, g, rg.Schedule, "1f1b's order does not depend on costs")
	rc.SetTrace(false)
	_, err = rc.Step(ctx, micro)
	require.NoError(t, err)
	assert.Empty(t, rc.Trace())
}
