// Package distrib runs process groups and collectives over TCP, for data
// parallel training across processes and machines.
//
// A process finds its place from its launcher's environment (FromEnv reads
// torchrun, Kubeflow's PyTorchJob, Slurm's srun and Open MPI's mpirun) and
// joins the group with Init. Rank 0 listens on the master port; every rank
// registers the address of its own peer listener there; rank 0 sends back
// the address table; each rank connects to rank+1 (sending) and accepts
// rank-1 (receiving). The rendezvous connection to rank 0 stays open as a
// control channel.
//
// Collectives work on []float32 (AllReduce with sum or mean, ReduceScatter,
// AllGather, Broadcast, Barrier) and on byte slices of any length
// (AllGatherObject, GatherObject, BroadcastObject). AllReduce is the
// bandwidth-optimal ring (reduce-scatter then all-gather), cut into chunks
// so that sending one chunk overlaps receiving and reducing the next;
// WithBF16 halves the bytes on the wire. Results are bit-identical on every
// rank and from run to run.
//
// Every collective takes a context and is bounded by the group's timeout.
// When a rank dies (its connections close) or does not answer in time, rank
// 0 gathers the evidence and every rank returns the same *RankError, naming
// the rank at fault ("rank 2 did not answer within 30s during AllReduce
// (step 17, collective 312)"); nothing hangs. With Config.Debug, ranks
// compare each collective's lengths before running it.
//
// Built with the tag mpi (cgo, Open MPI), InitMPI makes a Group whose
// collectives run on MPI instead (MPI_COMM_WORLD under mpirun); the Group's
// methods, checks and errors stay the same. Without the tag InitMPI returns
// ErrNoMPI and the package stays pure Go.
package distrib
