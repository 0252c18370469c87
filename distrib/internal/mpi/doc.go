// Package mpi binds Open MPI for package distrib's MPI transport. Without
// the build tag mpi (and cgo) it is empty.
package mpi
