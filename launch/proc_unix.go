//go:build unix

package launch

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// prepare puts the worker in a process group of its own, so that a
// terminal's Ctrl-C reaches only the launcher (which forwards it once), and
// so that a signal reaches everything the worker started (a shell wrapper's
// children included).
func prepare(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
}

// signalWorker sends sig to the worker's process group. The group's id is
// the worker's pid, which stays reserved until the launcher reaps it.
func signalWorker(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	err := syscall.Kill(-p.Pid, s)
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone
	}
	return err
}

// killSignal is what a worker gets when it outlives the grace period.
var killSignal os.Signal = syscall.SIGKILL

// stopSignal asks a worker to stop.
var stopSignal os.Signal = syscall.SIGTERM

// signalExitCode is the shell's convention for a process ended by sig:
// 128 + the signal number.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
