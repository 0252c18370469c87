package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// Defaults for the zero fields of a Config.
const (
	// DefaultMasterPort is the rendezvous port on several nodes (torchrun's).
	// On one node, a free port is picked instead.
	DefaultMasterPort = 29500
	// DefaultMonitorInterval is the pause between stopping failed workers
	// and starting them again.
	DefaultMonitorInterval = time.Second
	// DefaultGracePeriod is how long workers have to exit after SIGTERM
	// (or a forwarded signal) before they get SIGKILL.
	DefaultGracePeriod = 10 * time.Second
	// DefaultRunID is TORCHELASTIC_RUN_ID when Config.RunID is empty
	// (torchrun's default rendezvous id).
	DefaultRunID = "none"
)

// Config describes the workers one launcher runs on its node.
type Config struct {
	// NProcPerNode is the number of workers on this node (at least 1).
	NProcPerNode int
	// NNodes is the number of nodes, each with its own launcher; zero
	// means 1.
	NNodes int
	// NodeRank is this node's index, 0..NNodes-1. Global ranks are
	// NodeRank*NProcPerNode + local rank.
	NodeRank int
	// MasterAddr is the host of global rank 0, reachable from every node.
	// Empty means 127.0.0.1 on one node; several nodes must name it.
	MasterAddr string
	// MasterPort is the rendezvous port on MasterAddr. Zero means a free
	// port picked anew for every start on one node, DefaultMasterPort on
	// several.
	MasterPort int
	// MaxRestarts is how many times a failed group of workers is stopped
	// and started again before the launcher gives up.
	MaxRestarts int
	// MonitorInterval is the pause before a restart; zero means
	// DefaultMonitorInterval. (Worker exits are noticed at once.)
	MonitorInterval time.Duration
	// GracePeriod is how long workers have to exit after SIGTERM or a
	// forwarded signal before they are killed; zero means
	// DefaultGracePeriod.
	GracePeriod time.Duration
	// RunID is TORCHELASTIC_RUN_ID; empty means DefaultRunID.
	RunID string
	// SecretFile names a file holding the job's secret (--dist-secret-file),
	// passed to the workers as distrib.SecretFileVar. Without it, a secret
	// in the environment (distrib.SecretVar or distrib.SecretFileVar) is
	// passed on; without either, a single-node launcher draws one for its
	// workers, and a multi-node one refuses to start: every node must be
	// given the same secret.
	SecretFile string

	// Command is the worker's program and arguments. A program without a
	// path separator is looked up in PATH; see ResolveCommand for
	// "onnxtrain".
	Command []string
	// Env is the environment the workers inherit before the launcher's
	// variables are added; nil means os.Environ().
	Env []string
	// Dir is the workers' working directory; empty means the launcher's.
	Dir string

	// Stdout and Stderr receive the workers' lines, each prefixed with
	// "[rank R] "; nil discards them.
	Stdout, Stderr io.Writer
	// JSONStdout passes global rank 0's stdout through unprefixed (so that
	// JSON step records stay machine-readable) and sends the other ranks'
	// stdout, prefixed, to Stderr. See WantsJSONStdout.
	JSONStdout bool

	// Signals, when not nil, delivers the signals to forward to the
	// workers (the caller registers them with signal.Notify). The first
	// one is forwarded and ends the job (no restarts); a second one kills
	// the workers at once.
	Signals <-chan os.Signal
	// Logger receives the launcher's own records (starts, failures,
	// restarts); nil discards them.
	Logger logrus.FieldLogger

	// secretVar is the NAME=value the workers get for the job's secret,
	// when the launcher sets it (chooseSecret); empty: inherited as is.
	secretVar string
	// launchID names this invocation for its workers (ONNXTRAIN_LAUNCH_ID),
	// the same on every restart: a restarted worker knows by it that the
	// --output it finds is its own job's (train's restart.go).
	launchID string
}

// WorkerError reports the worker whose failure ended the job.
type WorkerError struct {
	Rank, LocalRank, PID int
	// Status is how it ended: "exit status 3", "signal: killed".
	Status string
	// ExitCode is its exit status, or -1 when a signal ended it.
	ExitCode int
	// Restarts is how many restarts were made before this failure, of
	// MaxRestarts allowed.
	Restarts, MaxRestarts int
	// Stopped is how many other workers of this node were still running
	// and were stopped.
	Stopped int
}

func (e *WorkerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "launch: worker rank %d (local rank %d, pid %d) failed: %s", e.Rank, e.LocalRank, e.PID, e.Status)
	switch e.Stopped {
	case 0:
	case 1:
		b.WriteString("; stopped the 1 other running worker")
	default:
		fmt.Fprintf(&b, "; stopped the %d other running workers", e.Stopped)
	}
	if e.MaxRestarts > 0 {
		fmt.Fprintf(&b, " (after %d of --max-restarts %d restarts)", e.Restarts, e.MaxRestarts)
	}
	return b.String()
}

// SignalError reports that the launcher was asked to stop by a signal,
// which it forwarded to its workers.
type SignalError struct {
	Signal os.Signal
	// Workers is how many workers were running when it arrived.
	Workers int
}

func (e *SignalError) Error() string {
	return fmt.Sprintf("launch: received %s; forwarded it to %d running worker(s) and stopped", signalName(e.Signal), e.Workers)
}

// ExitCode is the status a launcher ended by this signal exits with: 128 +
// the signal number, as a shell reports it.
func (e *SignalError) ExitCode() int { return signalExitCode(e.Signal) }

func signalName(s os.Signal) string {
	switch s.String() {
	case "interrupt":
		return "SIGINT"
	case "terminated":
		return "SIGTERM"
	case "hangup":
		return "SIGHUP"
	case "quit":
		return "SIGQUIT"
	}
	return s.String()
}

// WantsJSONStdout reports whether the worker arguments ask for JSON logs
// (`--log-format json` or `--log-format=json`), in which case rank 0's
// stdout should pass through unprefixed.
func WantsJSONStdout(args []string) bool {
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--log-format=json" || (a == "--log-format" && i+1 < len(args) && args[i+1] == "json") {
			return true
		}
	}
	return false
}

// ResolveCommand returns the command with its program made runnable: the
// name "onnxtrain" means the launcher's own executable (os.Executable), so
// that workers run the same build as the launcher; any other name without
// a path separator is looked up in PATH.
func ResolveCommand(command []string) ([]string, error) {
	if len(command) == 0 || command[0] == "" {
		return nil, errors.New("launch: no worker command given (put it after --, e.g. `onnxtrain launch --nproc-per-node 2 -- onnxtrain train ...`)")
	}
	out := append([]string(nil), command...)
	switch {
	case command[0] == "onnxtrain":
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("launch: finding the onnxtrain executable to run as the workers: %w", err)
		}
		out[0] = self
	case !strings.ContainsRune(command[0], filepath.Separator) && !strings.ContainsRune(command[0], '/'):
		p, err := exec.LookPath(command[0])
		if err != nil {
			return nil, fmt.Errorf("launch: worker program %q: %w", command[0], err)
		}
		out[0] = p
	default:
		st, err := os.Stat(command[0])
		if err != nil {
			return nil, fmt.Errorf("launch: worker program: %w", err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("launch: worker program %s is a directory", command[0])
		}
	}
	return out, nil
}

// normalize checks the config and fills in its defaults.
func (c *Config) normalize() error {
	if c.NProcPerNode < 1 {
		return fmt.Errorf("launch: --nproc-per-node %d: want at least 1 worker per node", c.NProcPerNode)
	}
	if c.NNodes == 0 {
		c.NNodes = 1
	}
	if c.NNodes < 1 {
		return fmt.Errorf("launch: --nnodes %d: want at least 1 node", c.NNodes)
	}
	if c.NodeRank < 0 || c.NodeRank >= c.NNodes {
		return fmt.Errorf("launch: --node-rank %d is outside 0..%d (--nnodes %d)", c.NodeRank, c.NNodes-1, c.NNodes)
	}
	if c.MasterPort < 0 || c.MasterPort > 65535 {
		return fmt.Errorf("launch: --master-port %d is outside 1..65535", c.MasterPort)
	}
	if c.NNodes > 1 {
		if c.MasterAddr == "" {
			return fmt.Errorf("launch: --nnodes %d needs --master-addr: the host of node rank 0, reachable from every node", c.NNodes)
		}
		if c.MasterPort == 0 {
			c.MasterPort = DefaultMasterPort
		}
	}
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if strings.ContainsAny(c.MasterAddr, " \t\n/") {
		return fmt.Errorf("launch: --master-addr %q is not a host name or address", c.MasterAddr)
	}
	if c.MaxRestarts < 0 {
		return fmt.Errorf("launch: --max-restarts %d: want 0 or more", c.MaxRestarts)
	}
	if c.MonitorInterval < 0 {
		return fmt.Errorf("launch: --monitor-interval %v: want a positive duration", c.MonitorInterval)
	}
	if c.MonitorInterval == 0 {
		c.MonitorInterval = DefaultMonitorInterval
	}
	if c.GracePeriod < 0 {
		return fmt.Errorf("launch: --grace-period %v: want a positive duration", c.GracePeriod)
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.RunID == "" {
		c.RunID = DefaultRunID
	}
	if c.launchID == "" {
		host, _ := os.Hostname()
		c.launchID = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
	}
	cmd, err := ResolveCommand(c.Command)
	if err != nil {
		return err
	}
	c.Command = cmd
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if err := c.chooseSecret(); err != nil {
		return err
	}
	if c.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		c.Logger = l
	}
	return nil
}

// Validate reports the first problem with the config's flags, without
// starting anything.
func (c Config) Validate() error { return c.normalize() }

// freeListener opens a listener on a free port of host; rank 0 inherits it
// (see distrib.ListenFDVar), so the port cannot be taken in between.
func freeListener(host string) (*net.TCPListener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		// The name may not be an address of this machine (a host name
		// that resolves elsewhere): any free port of this machine will do.
		ln, err = net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("launch: picking a free master port: %w", err)
		}
	}
	return ln.(*net.TCPListener), nil
}

// launcherVars are the variables the launcher sets for every worker; any
// inherited value of them is replaced.
var launcherVars = []string{
	"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
	"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
	"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
	"ONNXTRAIN_RESTART_COUNT", "ONNXTRAIN_MAX_RESTARTS", "ONNXTRAIN_LAUNCH_ID", distrib.ListenFDVar,
}

// workerEnv is the environment of local worker local on the restart-th
// start, talking to the master at port.
func (c *Config) workerEnv(local, restart, port int) []string {
	world := c.NNodes * c.NProcPerNode
	rank := c.NodeRank*c.NProcPerNode + local
	set := map[string]string{
		"MASTER_ADDR":                c.MasterAddr,
		"MASTER_PORT":                strconv.Itoa(port),
		"RANK":                       strconv.Itoa(rank),
		"WORLD_SIZE":                 strconv.Itoa(world),
		"LOCAL_RANK":                 strconv.Itoa(local),
		"LOCAL_WORLD_SIZE":           strconv.Itoa(c.NProcPerNode),
		"GROUP_RANK":                 strconv.Itoa(c.NodeRank),
		"GROUP_WORLD_SIZE":           strconv.Itoa(c.NNodes),
		"ROLE_NAME":                  "default",
		"ROLE_RANK":                  strconv.Itoa(rank),
		"ROLE_WORLD_SIZE":            strconv.Itoa(world),
		"TORCHELASTIC_RUN_ID":        c.RunID,
		"TORCHELASTIC_RESTART_COUNT": strconv.Itoa(restart),
		"TORCHELASTIC_MAX_RESTARTS":  strconv.Itoa(c.MaxRestarts),
		"ONNXTRAIN_RESTART_COUNT":    strconv.Itoa(restart),
		"ONNXTRAIN_MAX_RESTARTS":     strconv.Itoa(c.MaxRestarts),
		"ONNXTRAIN_LAUNCH_ID":        c.launchID,
	}
	env := make([]string, 0, len(c.Env)+len(set)+2)
	hasGOMAXPROCS := false
	for _, kv := range c.Env {
		name, _, _ := strings.Cut(kv, "=")
		if _, ours := set[name]; ours {
			continue
		}
		if c.secretVar != "" && (name == distrib.SecretVar || name == distrib.SecretFileVar) {
			continue // replaced below
		}
		if name == "GOMAXPROCS" {
			hasGOMAXPROCS = true
		}
		env = append(env, kv)
	}
	for _, name := range launcherVars {
		env = append(env, name+"="+set[name])
	}
	if c.secretVar != "" {
		env = append(env, c.secretVar)
	}
	// N Go workers on one machine would each run GOMAXPROCS = all CPUs and
	// fight over them (torchrun sets OMP_NUM_THREADS=1 for the same reason):
	// give each its share unless the user chose.
	if !hasGOMAXPROCS && c.NProcPerNode > 1 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(c.gomaxprocsPerWorker()))
	}
	return env
}

func (c *Config) gomaxprocsPerWorker() int {
	return max(1, runtime.GOMAXPROCS(0)/c.NProcPerNode)
}

// Run starts the workers and supervises them until they have all exited.
// It returns nil when every worker exited with status 0, a *WorkerError
// when a worker failed (after the allowed restarts), a *SignalError when a
// signal from Config.Signals stopped the job, ctx's error when ctx ended
// (the workers are then stopped as for a signal), and other errors for
// flags that do not make sense or programs that cannot start.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.normalize(); err != nil {
		return err
	}
	s := &supervisor{cfg: &cfg}
	if cfg.Stdout != nil {
		s.stdout = &sharedWriter{w: cfg.Stdout}
	}
	if cfg.Stderr != nil {
		s.stderr = &sharedWriter{w: cfg.Stderr}
	}
	for restart := 0; ; restart++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("launch: not starting the workers: %w", err)
		}
		port := cfg.MasterPort
		s.listener = nil
		if port == 0 {
			ln, err := freeListener(cfg.MasterAddr)
			if err != nil {
				return err
			}
			port = ln.Addr().(*net.TCPAddr).Port
			s.listener = ln
		}
		out := s.runOnce(ctx, restart, port)
		if s.listener != nil {
			s.listener.Close()
		}
		switch {
		case out.err != nil:
			return out.err
		case out.signal != nil:
			return &SignalError{Signal: out.signal, Workers: out.running}
		case out.ctxErr != nil:
			return fmt.Errorf("launch: stopped the workers: %w", out.ctxErr)
		case out.failed == nil:
			cfg.Logger.WithField("restarts", restart).Info("launch: all workers exited successfully")
			return nil
		}
		f := out.failed
		f.Restarts, f.MaxRestarts = restart, cfg.MaxRestarts
		if restart >= cfg.MaxRestarts {
			return f
		}
		cfg.Logger.WithFields(logrus.Fields{
			"rank": f.Rank, "status": f.Status, "restart": restart + 1, "max_restarts": cfg.MaxRestarts,
		}).Warnf("launch: worker rank %d failed (%s); restarting all %d local workers in %v (restart %d of %d)",
			f.Rank, f.Status, cfg.NProcPerNode, cfg.MonitorInterval, restart+1, cfg.MaxRestarts)
		if sig, err := s.pause(ctx); sig != nil {
			return &SignalError{Signal: sig}
		} else if err != nil {
			return fmt.Errorf("launch: before restarting the workers: %w", err)
		}
	}
}

type supervisor struct {
	cfg            *Config
	stdout, stderr *sharedWriter
	// listener is the master port the launcher opened, handed to rank 0.
	listener *net.TCPListener
}

// pause waits MonitorInterval before a restart, returning early on a
// signal or the end of ctx.
func (s *supervisor) pause(ctx context.Context) (os.Signal, error) {
	t := time.NewTimer(s.cfg.MonitorInterval)
	defer t.Stop()
	select {
	case <-t.C:
		return nil, nil
	case sig, ok := <-s.cfg.Signals:
		if !ok {
			// No more signals will come: wait out the pause.
			select {
			case <-t.C:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return sig, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type worker struct {
	rank, local int
	cmd         *exec.Cmd
	streams     []*lineWriter
	exited      bool
}

type exitEvent struct {
	w   *worker
	err error
}

// outcome is how one start of the workers ended.
type outcome struct {
	failed  *WorkerError // the first worker that failed, nil if none
	signal  os.Signal    // the forwarded signal that ended it
	running int          // workers running when the signal came
	ctxErr  error        // ctx ended
	err     error        // the workers could not be started
}

func (s *supervisor) streams(rank int) (stdout, stderr *lineWriter) {
	prefix := fmt.Sprintf("[rank %d] ", rank)
	stderr = newLineWriter(s.stderr, prefix)
	switch {
	case !s.cfg.JSONStdout:
		stdout = newLineWriter(s.stdout, prefix)
	case rank == 0:
		stdout = newLineWriter(s.stdout, "")
	default:
		stdout = newLineWriter(s.stderr, prefix)
	}
	return stdout, stderr
}

// runOnce starts the workers once and waits for all of them.
func (s *supervisor) runOnce(ctx context.Context, restart, port int) outcome {
	cfg := s.cfg
	log := cfg.Logger
	world := cfg.NNodes * cfg.NProcPerNode
	fields := logrus.Fields{
		"nproc_per_node": cfg.NProcPerNode, "world_size": world, "node_rank": cfg.NodeRank,
		"master": net.JoinHostPort(cfg.MasterAddr, strconv.Itoa(port)), "restart": restart,
	}
	if cfg.NProcPerNode > 1 && !hasVar(cfg.Env, "GOMAXPROCS") {
		fields["gomaxprocs"] = cfg.gomaxprocsPerWorker()
	}
	log.WithFields(fields).Infof("launch: starting %d worker(s): ranks %d..%d of %d",
		cfg.NProcPerNode, cfg.NodeRank*cfg.NProcPerNode, (cfg.NodeRank+1)*cfg.NProcPerNode-1, world)

	events := make(chan exitEvent, cfg.NProcPerNode)
	workers := make([]*worker, 0, cfg.NProcPerNode)
	running := 0
	var startErr error
	for local := range cfg.NProcPerNode {
		w := &worker{rank: cfg.NodeRank*cfg.NProcPerNode + local, local: local}
		cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
		cmd.Env = cfg.workerEnv(local, restart, port)
		if w.rank == 0 && s.listener != nil {
			if f, err := s.listener.File(); err == nil {
				defer f.Close()
				cmd.ExtraFiles = []*os.File{f}
				cmd.Env = append(cmd.Env, distrib.ListenFDVar+"=3")
			}
		}
		cmd.Dir = cfg.Dir
		stdout, stderr := s.streams(w.rank)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		w.streams = []*lineWriter{stdout, stderr}
		cmd.Stdin = nil
		// A worker's own children may keep its output open after it
		// exits; do not wait for them longer than the grace period.
		cmd.WaitDelay = cfg.GracePeriod
		prepare(cmd)
		if err := cmd.Start(); err != nil {
			startErr = fmt.Errorf("launch: starting worker rank %d (%s): %w", w.rank, cfg.Command[0], err)
			break
		}
		w.cmd = cmd
		workers = append(workers, w)
		running++
		log.WithFields(logrus.Fields{"rank": w.rank, "local_rank": local, "pid": cmd.Process.Pid}).Debug("launch: worker started")
		go func() { events <- exitEvent{w: w, err: cmd.Wait()} }()
	}

	var out outcome
	out.err = startErr
	signals := cfg.Signals
	done := ctx.Done()
	var killTimer <-chan time.Time
	stopAll := func(sig os.Signal) int {
		n := 0
		for _, w := range workers {
			if w.exited {
				continue
			}
			n++
			if err := signalWorker(w.cmd.Process, sig); err != nil {
				log.WithFields(logrus.Fields{"rank": w.rank, "signal": signalName(sig)}).WithError(err).Warn("launch: could not signal worker")
			}
		}
		return n
	}
	beginStop := func(sig os.Signal) int {
		n := stopAll(sig)
		if killTimer == nil {
			killTimer = time.After(cfg.GracePeriod)
		}
		return n
	}
	if startErr != nil {
		beginStop(stopSignal)
	}
	for running > 0 {
		select {
		case ev := <-events:
			ev.w.exited = true
			running--
			for _, l := range ev.w.streams {
				l.flush()
			}
			ps := ev.w.cmd.ProcessState
			// A worker that exited 0 succeeded even if a child of its own
			// kept its output open past the grace period (exec.ErrWaitDelay).
			success := ps != nil && ps.Success()
			status := describeExit(ps, ev.err)
			entry := log.WithFields(logrus.Fields{"rank": ev.w.rank, "status": status})
			if success {
				entry.Debug("launch: worker exited")
				continue
			}
			if killTimer != nil {
				// Stopping already: this is one of the stopped workers.
				entry.Debug("launch: worker stopped")
				continue
			}
			code := -1
			if ps != nil {
				code = ps.ExitCode()
			}
			out.failed = &WorkerError{Rank: ev.w.rank, LocalRank: ev.w.local, PID: ev.w.cmd.Process.Pid, Status: status, ExitCode: code}
			out.failed.Stopped = running
			if running > 0 {
				entry.Warnf("launch: worker rank %d failed (%s); stopping the %d other running worker(s)", ev.w.rank, status, running)
			} else {
				entry.Warnf("launch: worker rank %d failed (%s)", ev.w.rank, status)
			}
			beginStop(stopSignal)
		case sig, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			if out.signal != nil {
				log.Warnf("launch: second signal (%s): killing the %d running worker(s)", signalName(sig), running)
				stopAll(killSignal)
				continue
			}
			out.signal = sig
			log.Warnf("launch: received %s: forwarding it to %d running worker(s)", signalName(sig), running)
			out.running = beginStop(sig)
		case <-done:
			done = nil
			out.ctxErr = ctx.Err()
			log.WithError(ctx.Err()).Warn("launch: stopping the workers")
			beginStop(stopSignal)
		case <-killTimer:
			log.Warnf("launch: %d worker(s) still running %v after being asked to stop: killing them", running, cfg.GracePeriod)
			stopAll(killSignal)
			killTimer = make(chan time.Time) // never again
		}
	}
	return out
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); n == name {
			return true
		}
	}
	return false
}

// describeExit says how a worker ended: "exit status 3", "signal: killed".
func describeExit(ps *os.ProcessState, err error) string {
	if ps != nil && !ps.Success() {
		return ps.String()
	}
	if err != nil {
		// Exited 0 but its output could not be collected in time
		// (exec.ErrWaitDelay), or Wait itself failed.
		if ps != nil {
			return ps.String() + " (" + err.Error() + ")"
		}
		return err.Error()
	}
	if ps != nil {
		return ps.String()
	}
	return "unknown"
}

// chooseSecret decides how the workers get the job's secret: from
// SecretFile, from the launcher's environment (checked here, so that a bad
// one fails before any worker starts), or, on one node, drawn now.
func (c *Config) chooseSecret() error {
	c.secretVar = ""
	if c.SecretFile != "" {
		if _, err := distrib.ReadSecretFile(c.SecretFile); err != nil {
			return fmt.Errorf("launch: --dist-secret-file: %w", err)
		}
		abs, err := filepath.Abs(c.SecretFile)
		if err != nil {
			return fmt.Errorf("launch: --dist-secret-file: %w", err)
		}
		c.secretVar = distrib.SecretFileVar + "=" + abs
		return nil
	}
	lookup := func(name string) (string, bool) {
		for i := len(c.Env) - 1; i >= 0; i-- {
			if n, v, ok := strings.Cut(c.Env[i], "="); ok && n == name {
				return v, true
			}
		}
		return "", false
	}
	secret, err := distrib.SecretFromEnv(lookup)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if secret != nil {
		return nil // the workers inherit it
	}
	if c.NNodes > 1 {
		return fmt.Errorf("launch: --nnodes %d needs the job's secret, the same on every node: set %s (e.g. to the output of `openssl rand -hex 32`) or give --dist-secret-file, so that only the job's own processes can join it",
			c.NNodes, distrib.SecretVar)
	}
	s, err := distrib.NewSecret()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.secretVar = distrib.SecretVar + "=" + s
	return nil
}
