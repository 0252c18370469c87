package launch

import "syscall"

// setParentDeathSignal makes the kernel send SIGTERM to a worker whose
// launcher dies without stopping it (killed with SIGKILL, say), so that no
// worker is left holding a port or a GPU.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGTERM
}
