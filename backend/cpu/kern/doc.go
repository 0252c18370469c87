// Package kern holds what every CPU kernel shares: the Kernel signature, the
// kernel registry, the execution context and small helpers (broadcasting,
// axes, dtype dispatch). Kernel families live in the packages under
// backend/cpu/ops and register themselves here from init.
package kern
