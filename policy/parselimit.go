package policy

import (
	"strconv"
	"strings"
)

// ParseLimit reads a limit typed as text, as the admin page's forms send
// it: a decimal integer from 0 to the Max of the limit field names (its
// last dotted part, as in "shadow.requests_per_minute"; MaxLimit for a
// name that is no limit's), required. Its errors are EINVALID and name
// field, in the words the JSON API uses for a limit of a tier body.
func ParseLimit(field, value string) (int64, error) {
	if value == "" {
		return 0, Errorf(EINVALID, "%s is required", field)
	}
	max := int64(MaxLimit)
	if f, ok := LimitFieldNamed(field[strings.LastIndexByte(field, '.')+1:]); ok {
		max = f.Max
	}
	v, err := strconv.ParseInt(value, 10, 64)
	if err != nil || v < 0 || v > max {
		return 0, Errorf(EINVALID, "%s must be an integer from 0 to %d", field, max)
	}
	return v, nil
}
