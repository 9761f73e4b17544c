package store

// SetAfterCredentialsRead installs a hook that runs between a credentials
// cache miss's read and its cache write.
func SetAfterCredentialsRead(s *Store, fn func()) { s.afterCredentialsRead = fn }

// ClaimManySQL is the claim fast path's statement, for EXPLAIN.
var ClaimManySQL = claimManySQL
