package distrib

import (
	"errors"
	"fmt"
)

// Sentinel errors for errors.Is. A failed collective returns a *RankError
// that wraps one of them.
var (
	// ErrTimeout: a rank did not answer within the group's timeout.
	ErrTimeout = errors.New("distrib: timeout")
	// ErrPeerLost: a rank's connections closed (the process exited or was
	// killed) or broke.
	ErrPeerLost = errors.New("distrib: peer lost")
	// ErrMismatch: ranks called different collectives, or the same one with
	// different lengths.
	ErrMismatch = errors.New("distrib: collectives differ across ranks")
	// ErrAborted: a rank gave up a collective (its context was cancelled).
	ErrAborted = errors.New("distrib: collective aborted")
	// ErrInvalid: a rank passed arguments the collective cannot use.
	ErrInvalid = errors.New("distrib: invalid argument")
	// ErrClosed: the group, or a rank's group, was closed.
	ErrClosed = errors.New("distrib: process group closed")
)

// Kinds as they travel between ranks.
const (
	kindTimeout = iota + 1
	kindPeerLost
	kindMismatch
	kindAborted
	kindInvalid
	kindClosed
)

func kindError(k int) error {
	switch k {
	case kindTimeout:
		return ErrTimeout
	case kindPeerLost:
		return ErrPeerLost
	case kindMismatch:
		return ErrMismatch
	case kindAborted:
		return ErrAborted
	case kindInvalid:
		return ErrInvalid
	case kindClosed:
		return ErrClosed
	}
	return errors.New("distrib: unknown failure")
}

// RankError is the error of a failed collective. Every rank of the group
// gets the same Rank and message: rank 0 collects the evidence and tells the
// others, so that the rank that did not answer is named once, correctly.
type RankError struct {
	// Rank is the rank that failed or did not answer; -1 when unknown.
	Rank int
	// Op and Seq name the collective ("AllReduce", and its number in the
	// group's sequence of collectives, from 1); Step is the training step
	// given by WithStep, or -1.
	Op   string
	Seq  uint64
	Step int64
	// Kind is one of the sentinel errors (ErrTimeout, ErrPeerLost, ...).
	Kind error
	// Err is the local cause, when there is one (the context's error for
	// the rank whose context was cancelled).
	Err error
	// Msg is the message, without the "distrib: " prefix.
	Msg string
}

func (e *RankError) Error() string { return "distrib: " + e.Msg }

// Unwrap returns the kind and, when there is one, the local cause.
func (e *RankError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// opDesc names a collective in messages: "AllReduce (step 17, collective 312)".
func opDesc(op string, step int64, seq uint64) string {
	if step >= 0 {
		return fmt.Sprintf("%s (step %d, collective %d)", op, step, seq)
	}
	return fmt.Sprintf("%s (collective %d)", op, seq)
}
