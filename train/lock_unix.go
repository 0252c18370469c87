//go:build unix

package train

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this id exists on this
// machine (one of another user counts: signalling it is refused, not
// impossible).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
