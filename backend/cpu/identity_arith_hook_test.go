package cpu

// SetDropIdentityArithmetic turns the specialised pipeline's
// drop-identity-arithmetic pass on (the default) or off for the
// executables compiled afterwards.
func SetDropIdentityArithmetic(on bool) { keepIdentityArith.Store(!on) }
