package policy

// ParseLimit reads a limit typed as text, as the admin page's forms send
// it, by the row of LimitFields field names (its last dotted part, as in
// "shadow.requests_per_minute"; a count up to MaxLimit for a name that is
// no limit's), required: a decimal integer from 0 to the row's Max, or,
// for a spend limit, an amount of dollars ("20", "20.00", "$20"; see
// LimitField.Parse). Its errors are EINVALID and name field, in the words
// the JSON API uses for a limit of a tier body.
func ParseLimit(field, value string) (int64, error) {
	return limitFieldOf(field).Parse(field, value)
}
