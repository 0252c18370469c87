//go:build mpi && cgo

package distrib

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onnxtrain/onnxtrain/distrib/internal/mpi"
)

// MPIBuilt reports whether this binary was built with MPI (build tag mpi).
const MPIBuilt = true

// InitMPI joins the process group of every process mpirun started
// (MPI_COMM_WORLD): rank, world size and local rank come from MPI, and the
// collectives run on MPI (MPI_Allreduce, MPI_Reduce_scatter_block,
// MPI_Allgather, MPI_Bcast, MPI_Barrier; byte objects by gathering their
// sizes first, then MPI_Allgatherv or MPI_Gatherv). Of cfg it uses Debug,
// Timeout, Logger and Settings (compared across the ranks at once, as Init
// does; mpirun starts every process, so there is no handshake), but MPI
// calls are not bounded by Timeout: mpirun ends the job when a process
// dies. WithBF16 has no effect: tensors travel as
// float32.
//
// Close the group before the process exits: closing the last MPI group
// finalises MPI, and a process can join MPI groups only until then.
func InitMPI(ctx context.Context, cfg Config) (*Group, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("distrib: joining the MPI group: %w", err)
	}
	comm, err := mpi.Open()
	if err != nil {
		return nil, fmt.Errorf("distrib: joining the MPI group: %w", err)
	}
	cfg.Rank, cfg.WorldSize, cfg.LocalRank = comm.Rank(), comm.Size(), comm.LocalRank()
	cfg.Launcher = LauncherOpenMPI
	if cfg.Listener != nil {
		cfg.Listener.Close()
		cfg.Listener = nil
	}
	g := newGroup(cfg)
	g.tr = &mpiTransport{c: comm}
	if g.size > 1 && cfg.Settings != nil {
		if err := g.checkSettingsOver(g.tr); err != nil {
			_ = g.tr.close(false, g.timeout)
			return nil, err
		}
	}
	g.log.WithField("world_size", g.size).Debug("distrib: MPI process group ready")
	return g, nil
}

// mpiTransport adapts an MPI communicator to the Group's collectives.
type mpiTransport struct{ c *mpi.Comm }

func (t *mpiTransport) name() string { return "MPI" }

// wrap marks MPI's too-large-count errors as argument errors.
func wrap(err error) error {
	if errors.Is(err, mpi.ErrTooLarge) {
		return fmt.Errorf("%w (%w)", err, errTransportArg)
	}
	return err
}

func (t *mpiTransport) mean(x []float32, op ReduceOp) {
	if op == Mean {
		divideBy(x, float32(t.c.Size()))
	}
}

func (t *mpiTransport) allReduce(data []float32, op ReduceOp) error {
	if err := t.c.AllReduceSum(data); err != nil {
		return wrap(err)
	}
	t.mean(data, op)
	return nil
}

func (t *mpiTransport) reduceScatter(input, output []float32, op ReduceOp) error {
	if err := t.c.ReduceScatterSum(input, output); err != nil {
		return wrap(err)
	}
	t.mean(output, op)
	return nil
}

func (t *mpiTransport) allGather(input, output []float32) error {
	return wrap(t.c.AllGather(input, output))
}

func (t *mpiTransport) broadcast(data []float32, root int) error {
	return wrap(t.c.Bcast(data, root))
}

func (t *mpiTransport) barrier() error { return wrap(t.c.Barrier()) }

func (t *mpiTransport) allGatherBytes(obj []byte) ([][]byte, error) {
	out, err := t.c.AllGatherBytes(obj)
	return out, wrap(err)
}

func (t *mpiTransport) gatherBytes(obj []byte, root int) ([][]byte, error) {
	out, err := t.c.GatherBytes(obj, root)
	return out, wrap(err)
}

func (t *mpiTransport) broadcastBytes(obj []byte, root int) ([]byte, error) {
	out, err := t.c.BcastBytes(obj, root)
	return out, wrap(err)
}

func (t *mpiTransport) close(broken bool, wait time.Duration) error {
	if broken {
		t.c.Abandon()
		return nil
	}
	if err := t.c.Close(wait); err != nil {
		return fmt.Errorf("distrib: closing the MPI group: %w", err)
	}
	return nil
}
