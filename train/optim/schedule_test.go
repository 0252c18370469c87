package optim

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type goldenSchedule struct {
	Kind     string    `json:"kind"`
	Base     float64   `json:"base"`
	Warmup   int       `json:"warmup"`
	Total    int       `json:"total"`
	Cycles   float64   `json:"cycles"`
	StepSize int       `json:"step_size"`
	Gamma    float64   `json:"gamma"`
	LRs      []float64 `json:"lrs"`
}

func TestSchedulesMatchReference(t *testing.T) {
	raw, err := os.ReadFile("testdata/schedules.json")
	require.NoError(t, err)
	var gs []goldenSchedule
	require.NoError(t, json.Unmarshal(raw, &gs))
	require.Len(t, gs, 7)
	for _, g := range gs {
		var s Schedule
		switch g.Kind {
		case "linear":
			s = LinearWarmupDecay{Base: g.Base, WarmupSteps: g.Warmup, TotalSteps: g.Total}
		case "cosine":
			c := CosineWarmup{Base: g.Base, WarmupSteps: g.Warmup, TotalSteps: g.Total}
			if g.Cycles != 0.5 {
				c.Cycles = g.Cycles
			}
			s = c
		case "constant_warmup":
			s = ConstantWarmup{Base: g.Base, WarmupSteps: g.Warmup}
		case "step":
			s, err = NewStepLR(g.Base, g.StepSize, g.Gamma)
			require.NoError(t, err)
		default:
			t.Fatalf("unknown kind %q", g.Kind)
		}
		require.NotEmpty(t, g.LRs)
		for step, want := range g.LRs {
			got := s.LR(step)
			if g.Kind == "step" {
				assert.Equal(t, want, got, "%s step %d", g.Kind, step)
			} else {
				assert.InDelta(t, want, got, 1e-15*math.Max(1, math.Abs(want)), "%+v step %d", g, step)
			}
		}
	}
}

func TestScheduleShapes(t *testing.T) {
	assert.Equal(t, 0.5, Constant{Base: 0.5}.LR(1000))
	l := LinearWarmupDecay{Base: 1, WarmupSteps: 10, TotalSteps: 110}
	assert.Equal(t, 0.0, l.LR(0))
	assert.Equal(t, 0.5, l.LR(5))
	assert.Equal(t, 1.0, l.LR(10))
	assert.Equal(t, 0.5, l.LR(60))
	assert.Equal(t, 0.0, l.LR(500), "clamped at 0 past the end")
	c := CosineWarmup{Base: 2, WarmupSteps: 0, TotalSteps: 100}
	assert.Equal(t, 2.0, c.LR(0))
	assert.InDelta(t, 1.0, c.LR(50), 1e-12)
	assert.InDelta(t, 0.0, c.LR(100), 1e-12)

	s, err := NewStepLR(1, 2, 0.5)
	require.NoError(t, err)
	assert.Equal(t, 0.25, s.LR(5))
	assert.Equal(t, 1.0, s.LR(1), "going back recomputes")
	assert.Equal(t, 0.125, s.LR(6))
	_, err = NewStepLR(1, 0, 0.5)
	assert.ErrorContains(t, err, "step size must be positive")

	// A schedule drives the optimizer through SetLR.
	opt, err := NewSGD(SGDConfig{LR: 1})
	require.NoError(t, err)
	opt.SetLR(l.LR(5))
	assert.Equal(t, 0.5, opt.LR())
}
