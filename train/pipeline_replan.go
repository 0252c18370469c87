package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/onnxtrain/onnxtrain/pipeline"
)

// zeroBubbleReplan plans a zero-bubble schedule (zb1p, zbv) for the pass
// times this run measures instead of equal ones: the first step's times
// (compilation, first-touch pages) are dropped, and after the second step
// every process plans the same lists from the times all of them measured
// (pipeline.Runner.ReplanContext). The order of each stage's passes over
// the micro-batches stays what it was, so the losses do not change; the
// ranks idle less when forward, input-gradient and weight-gradient passes
// differ in cost. Other schedules do not depend on costs and are left as
// they are.
type zeroBubbleReplan struct{ steps int }

// afterStep is called by every process after each optimizer step (the
// same number of times in each); note says what it did.
func (z *zeroBubbleReplan) afterStep(ctx context.Context, runner *pipeline.Runner, note func(format string, args ...any)) error {
	if !runner.Schedule.SplitBackward() || z.steps >= 2 {
		return nil
	}
	z.steps++
	switch z.steps {
	case 1:
		runner.ResetProfile()
	case 2:
		before := runner.Schedule
		if err := runner.ReplanContext(ctx); err != nil {
			if !errors.Is(err, pipeline.ErrNotReplanned) {
				return fmt.Errorf("pipeline: planning %s for the measured pass times: %w", before.Name, err)
			}
			// the unit-cost lists stay: they are correct, only slower
			note("pipeline: %s kept its unit-cost order: %v", before.Name, err)
			return nil
		}
		if runner.Schedule != before {
			note("pipeline: %s replanned for the measured pass times", before.Name)
		}
	}
	return nil
}
