package auth

import "crypto/sha256"

// Fingerprint returns a hash of the admin token for records that must end
// when the token changes, such as admin page sessions. It reveals no more
// of the token than the SHA-256 the Gate holds.
func (g *Gate) Fingerprint() [sha256.Size]byte {
	return sha256.Sum256(append([]byte("policyguard admin session\x00"), g.token.hash[:]...))
}
