package train

import (
	"context"
	"errors"
	"fmt"
)

// Stopping a run on request (SIGINT/SIGTERM in `onnxtrain train`): the
// caller closes a channel it put in the context with WithStopRequest; Run
// finishes the optimizer step in progress, logs it, writes a checkpoint
// named by that step when --output is set, and returns a *StoppedError.
// Under data parallelism the request of any process stops all of them
// after the same step: the flag travels with the step's logged loss, which
// every process already averages, so it costs no extra collective.

type stopKey struct{}

// WithStopRequest returns a context whose Run stops at the end of the
// optimizer step in which stop is closed.
func WithStopRequest(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// stopRequested reports whether the context's stop channel is closed.
func stopRequested(ctx context.Context) bool {
	stop, _ := ctx.Value(stopKey{}).(<-chan struct{})
	if stop == nil {
		return false
	}
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// ErrStopped is wrapped by the error of a run stopped on request.
var ErrStopped = errors.New("training stopped on request")

// StoppedError is what Run returns when a stop request ended the run after
// step Step; Checkpoint is the folder it wrote (empty without --output).
type StoppedError struct {
	Step       int
	Checkpoint string
}

func (e *StoppedError) Error() string {
	if e.Checkpoint == "" {
		return fmt.Sprintf("%v after step %d; nothing saved (no --output)", ErrStopped, e.Step)
	}
	return fmt.Sprintf("%v after step %d; checkpoint %s (continue with --resume %s, or --resume latest)", ErrStopped, e.Step, e.Checkpoint, e.Checkpoint)
}

func (e *StoppedError) Unwrap() error { return ErrStopped }
