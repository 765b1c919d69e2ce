package policy

import (
	"unicode"
	"unicode/utf8"
)

// ValidateUserID returns an EINVALID error when id cannot name a user: it is
// longer than MaxUserIDBytes, is not UTF-8, or holds a control character
// (such as NUL, a newline or an escape), which would make it print as
// something it is not in logs and pages. The empty id is valid: it means
// AnonymousUser.
func ValidateUserID(id string) error {
	if len(id) > MaxUserIDBytes {
		return Errorf(EINVALID, "user_id must be at most %d bytes", MaxUserIDBytes)
	}
	if !utf8.ValidString(id) {
		return Errorf(EINVALID, "user_id must be valid UTF-8")
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return Errorf(EINVALID, "user_id must not contain control characters (found U+%04X)", r)
		}
	}
	return nil
}
