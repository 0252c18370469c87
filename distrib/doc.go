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
// Every connection between the ranks starts with a challenge-response over
// the job's secret (Config.Secret, from ONNXTRAIN_DIST_SECRET or the file
// ONNXTRAIN_DIST_SECRET_FILE names): HMAC-SHA-256 over fresh nonces from
// both sides (ClientHandshake, ServerHandshake, exported for other links
// between a job's processes). Each rank's listeners stay behind a gate for
// the life of the group: a connection that fails the handshake, sends
// garbage or stalls is closed after a short deadline and logged with its
// address and the reason, and the group goes on. When the group forms,
// rank 0 compares every rank's Config.Settings (model digest,
// hyper-parameters, data size); if any differ, Init fails on every rank
// with a *SettingsError naming each field and which ranks hold which
// value. Traffic is not encrypted.
//
// Built with the tag mpi (cgo, Open MPI), InitMPI makes a Group whose
// collectives run on MPI instead (MPI_COMM_WORLD under mpirun); the Group's
// methods, checks and errors stay the same. Without the tag InitMPI returns
// ErrNoMPI and the package stays pure Go.
package distrib
