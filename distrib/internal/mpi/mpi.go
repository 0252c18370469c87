//go:build mpi && cgo

// The cgo binding itself (build tag mpi). It lives apart from distrib
// because a package that uses cgo cannot hold Go assembly.

package mpi

/*
#cgo pkg-config: ompi-c
#include <stdlib.h>
#include <mpi.h>

// The MPI calls the transport makes, with the handles MPI defines as
// macros (MPI_COMM_WORLD, MPI_FLOAT, MPI_IN_PLACE...) kept on the C side.

static int ot_initialized(void) { int f = 0; MPI_Initialized(&f); return f; }
static int ot_finalized(void) { int f = 0; MPI_Finalized(&f); return f; }
static int ot_init(int *provided) { return MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, provided); }
static int ot_query_thread(int *provided) { return MPI_Query_thread(provided); }
static int ot_level_funneled(void) { return MPI_THREAD_FUNNELED; }
static int ot_finalize(void) { return MPI_Finalize(); }

static int ot_dup_world(MPI_Comm *out, int *rank, int *size) {
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_rank(*out, rank);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_size(*out, size);
}

static int ot_local_rank(MPI_Comm comm, int *local) {
	MPI_Comm node;
	int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_rank(node, local);
	MPI_Comm_free(&node);
	return rc;
}

static int ot_comm_free(MPI_Comm *comm) { return MPI_Comm_free(comm); }

static void ot_error_string(int code, char *buf) {
	int len = 0;
	if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) len = 0;
	buf[len] = 0;
}
static int ot_max_error_string(void) { return MPI_MAX_ERROR_STRING; }

static int ot_allreduce_f32(MPI_Comm comm, float *buf, int n) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm);
}
static int ot_reduce_scatter_f32(MPI_Comm comm, float *in, float *out, int m) {
	return MPI_Reduce_scatter_block(in, out, m, MPI_FLOAT, MPI_SUM, comm);
}
// ot_allgather_f32: this rank's block is already in place in buf.
static int ot_allgather_f32(MPI_Comm comm, float *buf, int m) {
	return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m, MPI_FLOAT, comm);
}
static int ot_bcast_f32(MPI_Comm comm, float *buf, int n, int root) {
	return MPI_Bcast(buf, n, MPI_FLOAT, root, comm);
}
static int ot_barrier(MPI_Comm comm) { return MPI_Barrier(comm); }

static int ot_allgather_i64(MPI_Comm comm, long long v, long long *out) {
	return MPI_Allgather(&v, 1, MPI_LONG_LONG, out, 1, MPI_LONG_LONG, comm);
}
static int ot_gather_i64(MPI_Comm comm, long long v, long long *out, int root) {
	return MPI_Gather(&v, 1, MPI_LONG_LONG, out, 1, MPI_LONG_LONG, root, comm);
}
static int ot_bcast_i64(MPI_Comm comm, long long *v, int root) {
	return MPI_Bcast(v, 1, MPI_LONG_LONG, root, comm);
}
static int ot_allgatherv_bytes(MPI_Comm comm, void *in, int n, void *out, int *counts, int *displs) {
	return MPI_Allgatherv(in, n, MPI_BYTE, out, counts, displs, MPI_BYTE, comm);
}
static int ot_gatherv_bytes(MPI_Comm comm, void *in, int n, void *out, int *counts, int *displs, int root) {
	return MPI_Gatherv(in, n, MPI_BYTE, out, counts, displs, MPI_BYTE, root, comm);
}
static int ot_bcast_bytes(MPI_Comm comm, void *buf, int n, int root) {
	return MPI_Bcast(buf, n, MPI_BYTE, root, comm);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// ErrTooLarge marks a call whose counts do not fit MPI's int.
var ErrTooLarge = errors.New("too large for MPI's int counts")

// The process's MPI library is initialised once, on a goroutine locked to
// one OS thread that then makes every MPI call (so MPI_THREAD_FUNNELED
// suffices), and finalised when the last Comm closes; after that no Comm
// can be opened in this process.
var lib struct {
	sync.Mutex
	calls     chan func() // the MPI thread's work; nil when it is not running
	open      int         // Comms not yet closed
	finalized bool
}

// onThread runs f on the MPI thread and waits for it.
func onThread(f func()) {
	done := make(chan struct{})
	lib.calls <- func() {
		defer close(done)
		f()
	}
	<-done
}

func startThread() {
	calls := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread belongs to MPI
		for f := range calls {
			f()
		}
	}()
	lib.calls = calls
}

// mpiError turns an MPI return code into an error (on the MPI thread).
func mpiError(what string, rc C.int) error {
	if rc == 0 { // MPI_SUCCESS
		return nil
	}
	buf := (*C.char)(C.malloc(C.size_t(C.ot_max_error_string() + 1)))
	defer C.free(unsafe.Pointer(buf))
	C.ot_error_string(rc, buf)
	return fmt.Errorf("%s: %s (MPI error code %d)", what, C.GoString(buf), int(rc))
}

// Comm is a duplicate of MPI_COMM_WORLD whose errors are returned, not
// fatal. Its methods must not be called concurrently.
type Comm struct {
	comm              C.MPI_Comm
	rank, size, local int
	closed            bool
}

// Rank, Size and LocalRank (the rank among the processes that share this
// machine's memory) are MPI's.
func (c *Comm) Rank() int      { return c.rank }
func (c *Comm) Size() int      { return c.size }
func (c *Comm) LocalRank() int { return c.local }

// Open initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED) unless it is
// already, and returns a new Comm over every process of the job.
func Open() (*Comm, error) {
	lib.Lock()
	defer lib.Unlock()
	if lib.finalized {
		return nil, errors.New("MPI was finalised in this process when its last MPI group closed; no new one can be made")
	}
	if lib.calls == nil {
		startThread()
	}
	c := &Comm{}
	var rank, size, local C.int
	var err error
	onThread(func() {
		if C.ot_finalized() != 0 {
			err = errors.New("MPI was finalised already")
			return
		}
		var provided C.int
		if C.ot_initialized() == 0 {
			if err = mpiError("MPI_Init_thread", C.ot_init(&provided)); err != nil {
				return
			}
		} else if err = mpiError("MPI_Query_thread", C.ot_query_thread(&provided)); err != nil {
			return
		}
		if provided < C.ot_level_funneled() {
			err = fmt.Errorf("the MPI library provides thread level %d, below MPI_THREAD_FUNNELED (%d)", int(provided), int(C.ot_level_funneled()))
			return
		}
		if err = mpiError("MPI_Comm_dup", C.ot_dup_world(&c.comm, &rank, &size)); err != nil {
			return
		}
		err = mpiError("MPI_Comm_split_type", C.ot_local_rank(c.comm, &local))
	})
	if err != nil {
		return nil, err
	}
	lib.open++
	c.rank, c.size, c.local = int(rank), int(size), int(local)
	return c, nil
}

// count checks that n elements fit MPI's int counts.
func count(what string, n int) (C.int, error) {
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%s of %d elements: MPI counts stop at %d: %w", what, n, math.MaxInt32, ErrTooLarge)
	}
	return C.int(n), nil
}

func f32ptr(x []float32) *C.float {
	if len(x) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&x[0]))
}

func bytePtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// overlap reports whether a and b share memory.
func overlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b))*4 && b0 < a0+uintptr(len(a))*4
}

// AllReduceSum replaces data with its sum over every rank (MPI_Allreduce,
// in place).
func (c *Comm) AllReduceSum(data []float32) (err error) {
	n, err := count("AllReduce", len(data))
	if err != nil {
		return err
	}
	onThread(func() { err = mpiError("MPI_Allreduce", C.ot_allreduce_f32(c.comm, f32ptr(data), n)) })
	return err
}

// ReduceScatterSum sums input (Size blocks of len(output)) over every rank
// and writes block Rank of the sum to output (MPI_Reduce_scatter_block).
func (c *Comm) ReduceScatterSum(input, output []float32) (err error) {
	m, err := count("ReduceScatter block", len(output))
	if err != nil {
		return err
	}
	if _, err := count("ReduceScatter", len(input)); err != nil {
		return err
	}
	out := output
	if overlap(input, output) { // MPI's buffers must not alias
		out = make([]float32, len(output))
	}
	onThread(func() {
		err = mpiError("MPI_Reduce_scatter_block", C.ot_reduce_scatter_f32(c.comm, f32ptr(input), f32ptr(out), m))
	})
	if err == nil {
		copy(output, out)
	}
	return err
}

// AllGather writes every rank's input, in rank order, to output
// (MPI_Allgather).
func (c *Comm) AllGather(input, output []float32) (err error) {
	m, err := count("AllGather block", len(input))
	if err != nil {
		return err
	}
	if _, err := count("AllGather", len(output)); err != nil {
		return err
	}
	copy(output[c.rank*len(input):], input)
	onThread(func() { err = mpiError("MPI_Allgather", C.ot_allgather_f32(c.comm, f32ptr(output), m)) })
	return err
}

// Bcast copies root's data to every rank (MPI_Bcast).
func (c *Comm) Bcast(data []float32, root int) (err error) {
	n, err := count("Broadcast", len(data))
	if err != nil {
		return err
	}
	onThread(func() { err = mpiError("MPI_Bcast", C.ot_bcast_f32(c.comm, f32ptr(data), n, C.int(root))) })
	return err
}

// Barrier is MPI_Barrier.
func (c *Comm) Barrier() (err error) {
	onThread(func() { err = mpiError("MPI_Barrier", C.ot_barrier(c.comm)) })
	return err
}

// layout turns object sizes into MPI counts and displacements in one
// buffer.
func layout(sizes []C.longlong) (counts, displs []C.int, total int, err error) {
	counts, displs = make([]C.int, len(sizes)), make([]C.int, len(sizes))
	for r, s := range sizes {
		if s < 0 || int64(total)+int64(s) > math.MaxInt32 {
			return nil, nil, 0, fmt.Errorf("the objects of ranks 0..%d add up to more than %d bytes, the most one MPI gather carries: %w", r, math.MaxInt32, ErrTooLarge)
		}
		counts[r], displs[r] = C.int(s), C.int(total)
		total += int(s)
	}
	return counts, displs, total, nil
}

// split cuts the gathered buffer into the ranks' objects.
func split(buf []byte, counts, displs []C.int) [][]byte {
	out := make([][]byte, len(counts))
	for r := range counts {
		lo, hi := int(displs[r]), int(displs[r])+int(counts[r])
		out[r] = buf[lo:hi:hi]
	}
	return out
}

// AllGatherBytes gathers every rank's bytes on every rank: the sizes with
// MPI_Allgather, then the bytes with MPI_Allgatherv.
func (c *Comm) AllGatherBytes(obj []byte) (out [][]byte, err error) {
	n, err := count("AllGatherObject", len(obj))
	if err != nil {
		return nil, err
	}
	sizes := make([]C.longlong, c.size)
	onThread(func() {
		if err = mpiError("MPI_Allgather (object sizes)", C.ot_allgather_i64(c.comm, C.longlong(len(obj)), &sizes[0])); err != nil {
			return
		}
		counts, displs, total, lerr := layout(sizes)
		if lerr != nil {
			err = lerr // every rank sees the same sizes and stops here
			return
		}
		buf := make([]byte, total)
		err = mpiError("MPI_Allgatherv", C.ot_allgatherv_bytes(c.comm, bytePtr(obj), n, bytePtr(buf), &counts[0], &displs[0]))
		if err == nil {
			out = split(buf, counts, displs)
		}
	})
	return out, err
}

// GatherBytes gathers every rank's bytes on root (MPI_Gather of the sizes,
// then MPI_Gatherv); the other ranks get nil.
func (c *Comm) GatherBytes(obj []byte, root int) (out [][]byte, err error) {
	n, err := count("GatherObject", len(obj))
	if err != nil {
		return nil, err
	}
	// Every rank learns every size, so that all agree on whether the
	// gather fits before any of them starts it.
	sizes := make([]C.longlong, c.size)
	onThread(func() {
		if err = mpiError("MPI_Allgather (object sizes)", C.ot_allgather_i64(c.comm, C.longlong(len(obj)), &sizes[0])); err != nil {
			return
		}
		counts, displs, total, lerr := layout(sizes)
		if lerr != nil {
			err = lerr
			return
		}
		var buf []byte
		if c.rank == root {
			buf = make([]byte, total)
		}
		err = mpiError("MPI_Gatherv", C.ot_gatherv_bytes(c.comm, bytePtr(obj), n, bytePtr(buf), &counts[0], &displs[0], C.int(root)))
		if err == nil && c.rank == root {
			out = split(buf, counts, displs)
		}
	})
	return out, err
}

// BcastBytes sends root's bytes to every rank (MPI_Bcast of the size, then
// of the bytes); root gets obj back.
func (c *Comm) BcastBytes(obj []byte, root int) (out []byte, err error) {
	onThread(func() {
		size := C.longlong(len(obj))
		if err = mpiError("MPI_Bcast (object size)", C.ot_bcast_i64(c.comm, &size, C.int(root))); err != nil {
			return
		}
		if size > math.MaxInt32 {
			err = fmt.Errorf("BroadcastObject of %d bytes: MPI counts stop at %d: %w", int64(size), math.MaxInt32, ErrTooLarge)
			return
		}
		out = obj
		if c.rank != root {
			out = make([]byte, int(size))
		}
		err = mpiError("MPI_Bcast", C.ot_bcast_bytes(c.comm, bytePtr(out), C.int(size), C.int(root)))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Close frees the Comm; closing the last one finalises MPI (MPI_Finalize),
// which waits for the other processes to finalise too. Close gives up
// after wait and returns an error, so that a process whose peers are stuck
// still exits (mpirun then ends the job).
func (c *Comm) Close(wait time.Duration) error {
	lib.Lock()
	defer lib.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	lib.open--
	last := lib.open == 0
	done := make(chan error, 1)
	lib.calls <- func() {
		err := mpiError("MPI_Comm_free", C.ot_comm_free(&c.comm))
		if last {
			if ferr := mpiError("MPI_Finalize", C.ot_finalize()); err == nil {
				err = ferr
			}
		}
		done <- err
	}
	if last {
		lib.finalized = true
		close(lib.calls)
		lib.calls = nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("MPI_Finalize did not return within %s: the other processes did not finalise", wait)
	}
}

// Abandon gives the Comm up without an MPI call, for a process that leaves
// a failed job: it will exit without MPI_Finalize, and mpirun ends the
// other processes.
func (c *Comm) Abandon() {
	lib.Lock()
	defer lib.Unlock()
	c.closed = true
}
