package kern

// curg returns the address of the calling goroutine's runtime descriptor:
// a key that no other live goroutine shares (the descriptor is reused only
// after the goroutine has exited).
func curg() uintptr
