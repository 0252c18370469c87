package pipeline

// SetListenHook makes NewTCPTransport call f with each rank's listener
// address as soon as it listens; the returned function removes it.
func SetListenHook(f func(rank int, addr string)) func() {
	listenHook = f
	return func() { listenHook = nil }
}

// DeviceWorkers is deviceWorkers.
var DeviceWorkers = deviceWorkers
