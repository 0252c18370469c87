//go:build unix && !linux

package launch

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: a worker whose launcher is killed keeps running.
func setParentDeathSignal(*syscall.SysProcAttr) {}
