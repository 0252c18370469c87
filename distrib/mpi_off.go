//go:build !mpi || !cgo

package distrib

import (
	"context"
	"fmt"
)

// MPIBuilt reports whether this binary was built with MPI (build tag mpi).
const MPIBuilt = false

// InitMPI fails: this binary was built without MPI. Build with
// `go build -tags mpi` (cgo, and Open MPI's headers and library, Debian's
// libopenmpi-dev) for a Group whose collectives run on MPI.
func InitMPI(ctx context.Context, cfg Config) (*Group, error) {
	return nil, fmt.Errorf("distrib: %w", ErrNoMPI)
}
