package backend

import "context"

// ReduceOp is how a collective combines the processes' values.
type ReduceOp int

const (
	// ReduceSum adds the values of every process.
	ReduceSum ReduceOp = iota
	// ReduceMean adds them and divides by the number of processes.
	ReduceMean
)

// String is the op's attribute spelling ("sum", "mean").
func (o ReduceOp) String() string {
	if o == ReduceMean {
		return "mean"
	}
	return "sum"
}

// CommOptions tune one collective.
type CommOptions struct {
	// Compress is "" (float32 on the wire) or "bf16" (each value rounded
	// to bfloat16 for transport, accumulated in float32).
	Compress string
}

// Communicator is what the kernels of the collective ops
// (graph.AllReduceOp, AllReduceStartOp, AllReduceWaitOp and
// graph.AllReduceSumOp) call to exchange data with the other processes of a
// data-parallel group. It is backend-neutral: it moves host float32 slices.
// A backend whose memory is the host's passes its buffers themselves (the
// CPU backend does: the reduction is made in the state buffers); another
// stages through host memory, or does not use a Communicator at all for
// its own transport (NCCL) and only takes the group's rank and size from
// it.
//
// ZeRO's ops (graph.ReduceScatterOp, AllGatherOp) use ReduceScatter and
// AllGather over a flat space of parameters; graph.ClipGradNormShardedOp
// uses AllGather for its per-tensor sums of squares.
//
// The training loop puts the communicator in the context of each Run
// (WithCommunicator). It carries the Run's collectives one at a time, in
// the order the kernels issue them (synchronous calls queue behind the
// started all-reduces), so that every process sends the same messages in
// the same order.
type Communicator interface {
	Collective // AllReduceSum (synchronised BatchNorm) and WorldSize
	// Rank is this process's index in [0, WorldSize).
	Rank() int
	// AllReduce replaces the concatenation of bufs, on every process, by
	// its element-wise reduction over all processes (one message).
	AllReduce(ctx context.Context, bufs [][]float32, op ReduceOp, o CommOptions) error
	// StartAllReduce starts the same reduction and returns at once; bufs
	// must not be read or written until Wait(bucket) returns. bucket
	// identifies the operation within the Run.
	StartAllReduce(ctx context.Context, bucket int, bufs [][]float32, op ReduceOp, o CommOptions) error
	// Wait blocks until the all-reduce started for bucket has finished and
	// returns its error.
	Wait(ctx context.Context, bucket int) error
	// ReduceScatter reduces x (WorldSize blocks of len(x)/WorldSize
	// elements) over all processes and returns this process's block of
	// the result, a subslice of x (the rest of x is scratch afterwards).
	ReduceScatter(ctx context.Context, x []float32, op ReduceOp, o CommOptions) ([]float32, error)
	// AllGather concatenates every process's mine, in rank order, into
	// all (WorldSize·len(mine) elements).
	AllGather(ctx context.Context, mine, all []float32) error
}

type communicatorKey struct{}

// WithCommunicator returns a context carrying c for the kernels of a Run
// (its Collective side included: CollectiveFrom returns c).
func WithCommunicator(ctx context.Context, c Communicator) context.Context {
	return context.WithValue(ctx, communicatorKey{}, c)
}

// CommunicatorFrom returns the communicator set by WithCommunicator, or nil
// (one process).
func CommunicatorFrom(ctx context.Context) Communicator {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(communicatorKey{}).(Communicator)
	return c
}
