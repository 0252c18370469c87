package distrib

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// transport runs a Group's collectives on something other than the TCP
// ring (MPI, with the build tag mpi). The Group keeps the checks, the
// sequence numbers, the Debug comparison and the error values; a transport
// only moves and reduces the data. Every method is called under the
// Group's mutex, one at a time, with a world of at least two.
type transport interface {
	// name is what errors call it ("MPI").
	name() string
	allReduce(data []float32, op ReduceOp) error
	// reduceScatter reduces input (size blocks of len(output)) and writes
	// this rank's block to output.
	reduceScatter(input, output []float32, op ReduceOp) error
	allGather(input, output []float32) error
	broadcast(data []float32, root int) error
	barrier() error
	allGatherBytes(obj []byte) ([][]byte, error)
	// gatherBytes returns nil on every rank but root.
	gatherBytes(obj []byte, root int) ([][]byte, error)
	broadcastBytes(obj []byte, root int) ([]byte, error)
	// close leaves the transport, waiting at most wait for the others;
	// broken says a collective failed, so the others may never come.
	close(broken bool, wait time.Duration) error
}

// errTransportArg marks a transport error caused by the arguments (a
// tensor too large for the transport's counts), as opposed to a failure of
// the transport itself.
var errTransportArg = errors.New("argument the transport cannot carry")

// viaTransport runs collective c on g.tr. A transport's calls cannot be
// interrupted: the context is checked before the call, and a lost or stuck
// rank is the transport's launcher's to handle (mpirun ends the job when a
// process dies). A failed call breaks the group, as on TCP.
func (g *Group) viaTransport(ctx context.Context, c *call, s spec, alt func(t transport) error) error {
	desc := opDesc(c.op, c.step, c.seq)
	if err := ctx.Err(); err != nil {
		v := &RankError{Rank: g.rank, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrAborted, Err: err,
			Msg: fmt.Sprintf("rank %d gave up %s: %v", g.rank, desc, err)}
		g.setVerdict(v)
		return v
	}
	if g.cfg.Debug {
		blocks, err := g.tr.allGatherBytes(debugDescOf(c, s))
		if err != nil {
			return g.transportFailure(c, fmt.Errorf("comparing the collective across ranks: %w", err))
		}
		descs, r, err := decodeDescs(blocks)
		if err != nil {
			v := &RankError{Rank: r, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrMismatch,
				Msg: fmt.Sprintf("%s: collectives differ across ranks: %v", desc, err)}
			g.setVerdict(v)
			return v
		}
		if err := g.compareDescs(c, descs); err != nil {
			g.finished.Store(c.seq)
			return err
		}
	} else if s.invalid != "" {
		// Without Debug the other ranks do not know; they wait in the
		// transport until the launcher ends the job when this one exits.
		v := &RankError{Rank: g.rank, Op: c.op, Seq: c.seq, Step: c.step, Kind: ErrInvalid,
			Msg: fmt.Sprintf("rank %d: %s: %s", g.rank, desc, s.invalid)}
		g.setVerdict(v)
		return v
	}
	if err := alt(g.tr); err != nil {
		return g.transportFailure(c, err)
	}
	g.finished.Store(c.seq)
	return nil
}

func (g *Group) transportFailure(c *call, err error) error {
	kind := ErrPeerLost
	rank := -1
	if errors.Is(err, errTransportArg) {
		kind, rank = ErrInvalid, g.rank
	}
	v := &RankError{Rank: rank, Op: c.op, Seq: c.seq, Step: c.step, Kind: kind, Err: err,
		Msg: fmt.Sprintf("%s failed on rank %d in %s: %v", opDesc(c.op, c.step, c.seq), g.rank, g.tr.name(), err)}
	g.setVerdict(v)
	return v
}

// ErrNoMPI is InitMPI's error in a binary built without MPI.
var ErrNoMPI = errors.New("this binary was built without MPI support: rebuild with `go build -tags mpi` (needs cgo and Open MPI's libopenmpi-dev)")
