package policy

import "strconv"

// ParseLimit reads a limit typed as text, as the admin page's forms send
// it: a decimal integer from 0 to MaxLimit, required. Its errors are
// EINVALID and name field, in the words the JSON API uses for a limit of
// a tier body.
func ParseLimit(field, value string) (int64, error) {
	if value == "" {
		return 0, Errorf(EINVALID, "%s is required", field)
	}
	v, err := strconv.ParseInt(value, 10, 64)
	if err != nil || v < 0 || v > MaxLimit {
		return 0, Errorf(EINVALID, "%s must be an integer from 0 to %d", field, MaxLimit)
	}
	return v, nil
}
