package distrib

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// Defaults used when a Config leaves a field zero.
const (
	// DefaultMasterPort is torchrun's default rendezvous port.
	DefaultMasterPort = 29500
	// DefaultTimeout bounds the rendezvous and every collective.
	DefaultTimeout = 10 * time.Minute
	// DefaultChunkBytes is the pipelining unit of the ring collectives.
	DefaultChunkBytes = 1 << 20
)

// The launchers FromEnv recognises, as reported in Config.Launcher.
const (
	LauncherNone     = "none"     // no launcher variables: a single process
	LauncherTorchrun = "torchrun" // torchrun / torch.distributed.run (TORCHELASTIC_RUN_ID or LOCAL_RANK set)
	LauncherEnv      = "env"      // MASTER_ADDR/RANK/WORLD_SIZE without torchrun's extras: Kubeflow PyTorchJob and similar
	LauncherSlurm    = "slurm"    // srun
	LauncherOpenMPI  = "openmpi"  // mpirun from Open MPI
)

// Config says where a process sits in the job and how to reach the others.
type Config struct {
	Rank, WorldSize int
	// LocalRank is the rank among the processes of the same machine
	// (informational: the group does not use it).
	LocalRank  int
	MasterAddr string
	MasterPort int
	// Timeout bounds the rendezvous and each collective; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Debug compares each collective's tensor lengths across ranks before
	// running it (one extra small exchange per collective).
	Debug bool

	// Launcher names the environment FromEnv read (one of the Launcher*
	// constants); informational.
	Launcher string
	// ListenHost is the host this rank binds its peer listener to and
	// advertises to the others. Empty: the loopback address when MasterAddr
	// is a loopback address, otherwise every interface, advertised as the
	// local address this rank uses to reach the master.
	ListenHost string
	// Listener, on rank 0 only, is an already open rendezvous listener used
	// instead of listening on MasterPort (a launcher or a test that picked a
	// free port). Init closes it.
	Listener net.Listener
	// ChunkBytes is the pipelining unit of the ring collectives; zero means
	// DefaultChunkBytes.
	ChunkBytes int
	// Logger receives debug-level records of the rendezvous and of failures,
	// and warnings about refused connections; nil discards them.
	Logger logrus.FieldLogger

	// Secret is the job's secret: every connection between the ranks
	// starts with a challenge-response over it (ClientHandshake,
	// ServerHandshake), and a process that cannot answer is refused. Every
	// rank must hold the same. Nil still runs the handshake, with an empty
	// key, and Init warns once that the job accepts any process that
	// reaches its ports. FromEnv reads it from SecretVar or SecretFileVar.
	Secret []byte
	// HandshakeTimeout bounds how long a listener waits for a new
	// connection to pass the handshake; zero means
	// DefaultHandshakeTimeout (at most Timeout).
	HandshakeTimeout time.Duration
	// Settings are what every rank must agree on (model digest,
	// hyper-parameters, data size); Init compares them across ranks when the
	// group forms and fails on every rank, naming each difference, when
	// they differ.
	Settings []Setting
}

func (c Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

func (c Config) chunkBytes() int {
	if c.ChunkBytes <= 0 {
		return DefaultChunkBytes
	}
	// A chunk holds whole float32 elements.
	if c.ChunkBytes < 64 {
		return 64
	}
	return c.ChunkBytes &^ 3
}

func (c Config) validate() error {
	if c.WorldSize < 1 {
		return fmt.Errorf("distrib: world size %d: want at least 1", c.WorldSize)
	}
	if c.Rank < 0 || c.Rank >= c.WorldSize {
		return fmt.Errorf("distrib: rank %d is outside 0..%d (world size %d)", c.Rank, c.WorldSize-1, c.WorldSize)
	}
	if c.WorldSize == 1 {
		return nil
	}
	if c.MasterAddr == "" {
		return fmt.Errorf("distrib: rank %d of %d: no master address (set MASTER_ADDR)", c.Rank, c.WorldSize)
	}
	if c.Listener == nil || c.Rank != 0 {
		if c.MasterPort < 1 || c.MasterPort > 65535 {
			return fmt.Errorf("distrib: master port %d is outside 1..65535", c.MasterPort)
		}
	}
	if c.Listener != nil && c.Rank != 0 {
		return fmt.Errorf("distrib: rank %d was given a rendezvous listener; only rank 0 listens", c.Rank)
	}
	return nil
}

// FromEnv builds a Config from the variables the common launchers set, in
// this order of precedence:
//
//   - torchrun and Kubeflow's PyTorchJob: RANK, WORLD_SIZE, LOCAL_RANK,
//     MASTER_ADDR, MASTER_PORT;
//   - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK; the master is MASTER_ADDR, or 127.0.0.1
//     when every process runs on one machine;
//   - Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is
//     MASTER_ADDR, or the first host of SLURM_STEP_NODELIST,
//     SLURM_JOB_NODELIST or SLURM_NODELIST.
//
// MASTER_PORT defaults to DefaultMasterPort. ONNXTRAIN_DIST_TIMEOUT (a Go
// duration such as "90s", or seconds) sets Timeout and ONNXTRAIN_DIST_DEBUG
// (a boolean) sets Debug. ONNXTRAIN_LISTEN_HOST sets ListenHost (the
// address this rank's peer listener binds to and advertises, on a machine
// with several). ONNXTRAIN_DIST_SECRET, or the file ONNXTRAIN_DIST_SECRET_FILE
// names, sets Secret. With none of the launcher variables, FromEnv returns
// a single-process Config (rank 0 of 1).
func FromEnv() (Config, error) {
	cfg, err := configFromEnv(os.LookupEnv)
	if err != nil {
		return cfg, err
	}
	// A launcher that picked the master port itself hands rank 0 the open
	// listening socket, so no other process can take the port meanwhile.
	if fd := os.Getenv(ListenFDVar); fd != "" && cfg.Rank == 0 && cfg.WorldSize > 1 {
		n, err := strconv.Atoi(fd)
		if err != nil || n < 3 {
			return cfg, fmt.Errorf("distrib: %s=%q is not a file descriptor", ListenFDVar, fd)
		}
		f := os.NewFile(uintptr(n), "master-listener")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return cfg, fmt.Errorf("distrib: %s: %w", ListenFDVar, err)
		}
		cfg.Listener = ln
	}
	return cfg, nil
}

// ListenFDVar names the variable through which a launcher passes rank 0 an
// already open rendezvous listener (a file descriptor number).
const ListenFDVar = "ONNXTRAIN_MASTER_LISTEN_FD"

type lookupFunc func(string) (string, bool)

// envInt reads an integer variable; ok is false when it is unset or empty.
func envInt(lookup lookupFunc, name string) (v int, ok bool, err error) {
	s, ok := lookup(name)
	s = strings.TrimSpace(s)
	if !ok || s == "" {
		return 0, false, nil
	}
	v, err = strconv.Atoi(s)
	if err != nil {
		return 0, true, fmt.Errorf("distrib: %s=%q is not an integer", name, s)
	}
	return v, true, nil
}

func envString(lookup lookupFunc, name string) string {
	s, _ := lookup(name)
	return strings.TrimSpace(s)
}

// requireInt reads an integer that must be present and at least min.
func requireInt(lookup lookupFunc, name, launcher string, min int) (int, error) {
	v, ok, err := envInt(lookup, name)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("distrib: %s is not set (%s environment)", name, launcher)
	}
	if v < min {
		return 0, fmt.Errorf("distrib: %s=%d: want at least %d", name, v, min)
	}
	return v, nil
}

func configFromEnv(lookup lookupFunc) (Config, error) {
	cfg, err := launcherConfig(lookup)
	if err != nil {
		return Config{}, err
	}
	if cfg.Rank >= cfg.WorldSize {
		return Config{}, fmt.Errorf("distrib: rank %d is not below the world size %d (%s environment)", cfg.Rank, cfg.WorldSize, cfg.Launcher)
	}
	port, ok, err := envInt(lookup, "MASTER_PORT")
	if err != nil {
		return Config{}, err
	}
	if !ok {
		port = DefaultMasterPort
	}
	if port < 1 || port > 65535 {
		return Config{}, fmt.Errorf("distrib: MASTER_PORT=%d is outside 1..65535", port)
	}
	cfg.MasterPort = port
	if s := envString(lookup, "ONNXTRAIN_DIST_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			secs, err2 := strconv.ParseFloat(s, 64)
			if err2 != nil {
				return Config{}, fmt.Errorf("distrib: ONNXTRAIN_DIST_TIMEOUT=%q is neither a duration (\"90s\") nor a number of seconds", s)
			}
			d = time.Duration(secs * float64(time.Second))
		}
		if d <= 0 {
			return Config{}, fmt.Errorf("distrib: ONNXTRAIN_DIST_TIMEOUT=%q: want a positive duration", s)
		}
		cfg.Timeout = d
	}
	if s := envString(lookup, "ONNXTRAIN_DIST_DEBUG"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return Config{}, fmt.Errorf("distrib: ONNXTRAIN_DIST_DEBUG=%q is not a boolean", s)
		}
		cfg.Debug = b
	}
	secret, err := SecretFromEnv(lookup)
	if err != nil {
		return Config{}, err
	}
	cfg.Secret = secret
	if s := envString(lookup, "ONNXTRAIN_LISTEN_HOST"); s != "" {
		if strings.ContainsAny(s, " /") {
			return Config{}, fmt.Errorf("distrib: ONNXTRAIN_LISTEN_HOST=%q is not a host name or address", s)
		}
		cfg.ListenHost = s
	}
	return cfg, nil
}

func launcherConfig(lookup lookupFunc) (Config, error) {
	_, hasRank := lookup("RANK")
	_, hasWorld := lookup("WORLD_SIZE")
	_, hasOMPI := lookup("OMPI_COMM_WORLD_RANK")
	_, hasSlurm := lookup("SLURM_PROCID")
	switch {
	case hasRank || hasWorld:
		return torchrunConfig(lookup)
	case hasOMPI:
		return openMPIConfig(lookup)
	case hasSlurm:
		return slurmConfig(lookup)
	}
	return Config{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", Launcher: LauncherNone}, nil
}

func torchrunConfig(lookup lookupFunc) (Config, error) {
	launcher := LauncherEnv
	_, hasLocal := lookup("LOCAL_RANK")
	if _, ok := lookup("TORCHELASTIC_RUN_ID"); ok || hasLocal {
		launcher = LauncherTorchrun
	}
	rank, err := requireInt(lookup, "RANK", launcher, 0)
	if err != nil {
		return Config{}, err
	}
	world, err := requireInt(lookup, "WORLD_SIZE", launcher, 1)
	if err != nil {
		return Config{}, err
	}
	local, _, err := envInt(lookup, "LOCAL_RANK")
	if err != nil {
		return Config{}, err
	}
	if local < 0 {
		return Config{}, fmt.Errorf("distrib: LOCAL_RANK=%d is negative", local)
	}
	if lw, ok, err := envInt(lookup, "LOCAL_WORLD_SIZE"); err != nil {
		return Config{}, err
	} else if ok && local >= lw {
		return Config{}, fmt.Errorf("distrib: LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d", local, lw)
	}
	if local > rank {
		return Config{}, fmt.Errorf("distrib: LOCAL_RANK=%d is above RANK=%d", local, rank)
	}
	addr := envString(lookup, "MASTER_ADDR")
	if addr == "" {
		if world > 1 {
			return Config{}, fmt.Errorf("distrib: MASTER_ADDR is not set (%s environment, RANK=%d, WORLD_SIZE=%d)", launcher, rank, world)
		}
		addr = "127.0.0.1"
	}
	return Config{Rank: rank, WorldSize: world, LocalRank: local, MasterAddr: addr, Launcher: launcher}, nil
}

func openMPIConfig(lookup lookupFunc) (Config, error) {
	rank, err := requireInt(lookup, "OMPI_COMM_WORLD_RANK", LauncherOpenMPI, 0)
	if err != nil {
		return Config{}, err
	}
	world, err := requireInt(lookup, "OMPI_COMM_WORLD_SIZE", LauncherOpenMPI, 1)
	if err != nil {
		return Config{}, err
	}
	local, _, err := envInt(lookup, "OMPI_COMM_WORLD_LOCAL_RANK")
	if err != nil {
		return Config{}, err
	}
	if local < 0 || local > rank {
		return Config{}, fmt.Errorf("distrib: OMPI_COMM_WORLD_LOCAL_RANK=%d is outside 0..OMPI_COMM_WORLD_RANK=%d", local, rank)
	}
	addr := envString(lookup, "MASTER_ADDR")
	if addr == "" {
		// One machine can use loopback; several need to be told.
		if ls, ok, err := envInt(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE"); err != nil {
			return Config{}, err
		} else if ok && ls < world {
			return Config{}, fmt.Errorf("distrib: mpirun runs %d processes on several machines (%d on this one): set MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=...)", world, ls)
		}
		addr = "127.0.0.1"
	}
	return Config{Rank: rank, WorldSize: world, LocalRank: local, MasterAddr: addr, Launcher: LauncherOpenMPI}, nil
}

func slurmConfig(lookup lookupFunc) (Config, error) {
	rank, err := requireInt(lookup, "SLURM_PROCID", LauncherSlurm, 0)
	if err != nil {
		return Config{}, err
	}
	name := "SLURM_NTASKS"
	if _, ok := lookup(name); !ok {
		if _, old := lookup("SLURM_NPROCS"); old {
			name = "SLURM_NPROCS" // older Slurm
		}
	}
	world, err := requireInt(lookup, name, LauncherSlurm, 1)
	if err != nil {
		return Config{}, fmt.Errorf("%w (is the program started with srun?)", err)
	}
	local, _, err := envInt(lookup, "SLURM_LOCALID")
	if err != nil {
		return Config{}, err
	}
	if local < 0 || local > rank {
		return Config{}, fmt.Errorf("distrib: SLURM_LOCALID=%d is outside 0..SLURM_PROCID=%d", local, rank)
	}
	addr := envString(lookup, "MASTER_ADDR")
	if addr == "" {
		var list, from string
		for _, v := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if s := envString(lookup, v); s != "" {
				list, from = s, v
				break
			}
		}
		if list == "" {
			if world > 1 {
				return Config{}, fmt.Errorf("distrib: Slurm environment without a node list (SLURM_JOB_NODELIST) or MASTER_ADDR")
			}
			addr = "127.0.0.1"
		} else {
			first, err := FirstNode(list)
			if err != nil {
				return Config{}, fmt.Errorf("distrib: %s: %w", from, err)
			}
			addr = first
			// Rank 0 must run where the others will look for it.
			if node := envString(lookup, "SLURMD_NODENAME"); rank == 0 && node != "" && node != first {
				return Config{}, fmt.Errorf("distrib: rank 0 runs on %s but the first node of %s=%q is %s: set MASTER_ADDR", node, from, list, first)
			}
		}
	}
	return Config{Rank: rank, WorldSize: world, LocalRank: local, MasterAddr: addr, Launcher: LauncherSlurm}, nil
}
