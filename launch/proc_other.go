//go:build !unix

package launch

import (
	"os"
	"os/exec"
)

// prepare does nothing where there are no process groups.
func prepare(*exec.Cmd) {}

// signalWorker delivers sig to the worker itself; where signals other than
// Kill are not supported (Windows), the worker is killed.
func signalWorker(p *os.Process, sig os.Signal) error {
	if err := p.Signal(sig); err != nil {
		return p.Kill()
	}
	return nil
}

var (
	killSignal os.Signal = os.Kill
	stopSignal os.Signal = os.Interrupt
)

func signalExitCode(os.Signal) int { return 1 }
