package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/onnxtrain/onnxtrain/train"
	"github.com/sirupsen/logrus"
)

// Preemption (Slurm, Kubernetes and `onnxtrain launch` send SIGTERM;
// Ctrl-C sends SIGINT): the first signal asks train.Run to stop after the
// optimizer step in progress, with a checkpoint; a second one exits at once.

// signalStopper turns signals into a stop request.
type signalStopper struct {
	stop     chan struct{}
	done     chan struct{}
	exit     func(code int)
	mu       sync.Mutex
	received os.Signal
}

// newSignalStopper watches sigs until close; exit is called with
// 128+signal on the second signal.
func newSignalStopper(sigs <-chan os.Signal, exit func(code int)) *signalStopper {
	s := &signalStopper{stop: make(chan struct{}), done: make(chan struct{}), exit: exit}
	go func() {
		for {
			select {
			case <-s.done:
				return
			case sig := <-sigs:
				s.mu.Lock()
				first := s.received == nil
				if first {
					s.received = sig
				}
				s.mu.Unlock()
				if first {
					logrus.Warnf("received %v: finishing the current optimizer step, then saving a checkpoint (when --output is set) and stopping; send it again to exit at once", sig)
					close(s.stop)
					continue
				}
				logrus.Errorf("received %v again: exiting at once, without a checkpoint", sig)
				s.exit(signalExitCode(sig))
			}
		}
	}()
	return s
}

// Received is the first signal, or nil.
func (s *signalStopper) Received() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

func (s *signalStopper) close() { close(s.done) }

// signalExitCode is the shell's status of a process a signal ended.
func signalExitCode(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// trapStopSignals routes SIGINT and SIGTERM to a stopper for the life of
// a training command; release restores the default handling.
func trapStopSignals(ctx context.Context) (context.Context, *signalStopper, func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	s := newSignalStopper(sigs, os.Exit)
	return train.WithStopRequest(ctx, s.stop), s, func() {
		signal.Stop(sigs)
		s.close()
	}
}
