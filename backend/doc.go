// Package backend defines what a compute backend is (the Backend and
// Executable interfaces) and keeps the registry backends add themselves to,
// the database/sql driver way: a backend package calls Register in its init,
// and users choose one by name with Open.
//
// # Device-resident state
//
// A training program keeps its state in the backend's memory: parameters,
// BatchNorm running statistics, the gradient sums of an accumulation
// window and the optimizer's slots (momentum, Adam's moments). Per step
// only the batch and a few scalars (loss scale, learning rates, flags) go
// in, and only scalars (loss, gradient norm, found-inf flag) come out.
//
// The graph names state like any input; CompileOptions.State declares
// which inputs are state buffers:
//
//   - StateSpec.Name is a graph input the executable binds to a buffer it
//     owns; callers do not feed it to Run (feeding it is an error).
//   - StateSpec.Init is the initial value (dtype and shape included). A
//     backend whose memory is the host's (the CPU one) adopts the tensor
//     itself as the buffer, without copying it.
//   - StateSpec.UpdatedBy names a graph output whose value becomes the
//     state's after each successful Run; "" makes the state read-only for
//     this executable. Several executables may update the same state.
//     Run does not return such outputs: they stay in the buffer.
//
// CompileOptions.ShareState makes a new executable use the state buffers
// of one compiled earlier on the same backend: a declared state whose name
// the other executable already has binds to that buffer (Init is then only
// checked for dtype and shape), others are added to the shared set. A
// training program is a few executables over one set of state: the
// micro-batch step (forward, loss, backward, gradient sums), the gradient
// transformations (unscale and inf check, clipping) and the optimizer step,
// and evaluation.
//
// State updates are graph ops. The optimizer-step ops of onnxtrain's domain
// (graph.SGDUpdateOp, AdamUpdateOp, ClipGradNormOp, ClipGradValueOp,
// UnscaleGradsOp, AccumulateGradOp; their exact semantics are in
// graph/optimizer_ops.go) take many tensors per node and output their new
// values, with PyTorch 1.13's arithmetic; graph.UpdatedInput says which
// input each output replaces. Where such an output updates the state it
// replaces and no node of the program reads that state (or a view of it)
// after the updating node, a backend writes the new value into the buffer
// in place (the CPU backend does: a step copies nothing). That is how a
// program holding its optimizer's update (train.Program.BindUpdate)
// updates each parameter right after its last reader in backward: a
// backend that runs nodes concurrently must order every reader of a state
// before the node that updates it in place. Elsewhere the update is a
// copy inside the backend's memory after the run. An output may also
// replace a value the run made (a gradient clipped before its update) in
// place when nothing else reads that value or what it is a view of. Micro-batch gradients are summed in
// place by AccumulateGrad over gradient-sum state, its "fresh" input
// starting a new window; the optimizer step reads the sums.
//
// # State views
//
// A state buffer may be a view of another (StateViewer.ViewState): a
// named buffer whose elements are a contiguous range of another buffer's
// elements, in row-major order, with a shape of its own. A view is state
// like any other once declared: an executable compiled later with
// ShareState declares it by name in CompileOptions.State (Init only
// checked for dtype and shape), reads it as an input, updates it through
// UpdatedBy (in place where the rules above allow, otherwise by a copy
// into the viewed range), and ReadState/WriteState move just its range.
// Views let a program work on part of a buffer without owning a copy of
// it: ZeRO's optimizer step (train/program_zero.go) updates this process's
// slice of each parameter and reads its slice of the reduced gradient
// partition through views, and keeps its optimizer slots as buffers of
// the slices' size. A backend implements a view as a window on the
// base's memory (the CPU backend as a subslice: zero copies).
//
// One executable may declare buffers that overlap in memory (a view and
// its base, or two views of overlapping ranges) only if it updates none
// of them: otherwise the order of a read and an in-place write of the
// same memory would be undefined, and Compile fails naming the pair.
//
// # Collectives
//
// Data-parallel training adds collective ops to the program (their exact
// semantics are in graph/collective_ops.go and graph/grad_collective.go):
// AllReduce, and its split form AllReduceStart / AllReduceWait, average the
// gradient sums of a bucket across processes; ReduceScatter leaves this
// process's ZeRO partition of the averaged gradients in a state buffer;
// AllGather gives every process the parameter slices the others updated;
// AllReduceSum exchanges synchronised BatchNorm's statistics;
// ClipGradNormSharded (graph/zero_ops.go) clips the gradient slices a ZeRO
// process holds by the norm of the whole gradients, gathering per-tensor
// sums of squares with the communicator's AllGather. They are
// multi-tensor and functional like the optimizer-step ops (UpdatedInput
// pairs each output with the input it replaces), and a backend may chain
// in-place updates: AccumulateGrad, then AllReduceStart, then
// AllReduceWait update a gradient sum in its own buffer when each value of
// the chain is read by the next node only. A sync input (bool scalar)
// switches an op off on the micro-batches inside an accumulation window.
//
// Kernels reach the other processes through the Communicator the Run's
// context carries (WithCommunicator): host float32 slices, so the CPU
// backend passes its state buffers as they are; a GPU backend stages
// through host memory, or runs its own transport (NCCL) for the same ops.
// The communicator carries a Run's collectives in the order the kernels
// issue them, an all-reduce started by AllReduceStart travelling while the
// following nodes run; AllReduceWait blocks until its bucket is reduced.
// Without a communicator (one process) every collective op passes its
// operands through.
//
// An executable with state implements Stateful: ReadState and WriteState
// move a buffer between the backend and a host tensor, by name, for
// checkpoints, exports and explicit reads; HostState returns the buffer
// itself where it is host memory; StateTraffic counts the bytes that
// crossed, so that tests can check that a training step moves none.
//
// # Compile options and capabilities
//
// Every choice a backend makes while compiling comes from CompileOptions,
// per compile: nothing is read from the environment or from package
// state. Tuning (options.go) chooses between equivalent computations (the
// Winograd policy for 3×3 convolutions, the memory plan); a backend
// without such a choice ignores it. PrimitivesOnly and DisableFused
// restrict a backend to the decomposed graph.
//
// A backend declares the fused ops it has kernels for by implementing
// FusedOpsDeclarer (capability.go); the pass pipeline (graph/passes) runs
// a fusion only when every op it makes is declared, so the rest of the
// graph stays decomposed, and DeclaredFusedOps is empty under
// PrimitivesOnly or DisableFused. Executables may implement PlanInspector
// and MemoryPlanReporter, which the backend test kit (backend/backendtest)
// reads; docs/architecture.md walks through writing a backend.
package backend
