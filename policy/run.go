package policy

// A tier's run object limits each run of an agent: a run is named by the
// agent on its requests, and its limits count every request, token, dollar
// and open call of the run and its sub-agents from its first request, so
// no window ever frees them. They are rows of LimitFields in ScopeRun, as
// a tier's own limits are the rows in ScopeTier, so every surface that
// lists limits lists them by walking the same table.

// RunLimit returns the run limit id that t sets; nil when it sets none or
// has no run object. The value is t's: replace it, never write through it.
func (t *Tier) RunLimit(id LimitID) *int64 {
	if t.Run == nil || !id.Field().In(ScopeRun) {
		return nil
	}
	return t.Run[id]
}

// RunMaxDepth returns the levels a tree of t's runs may have, the root
// counting as one: the run object's max_depth, else DefaultRunMaxDepth.
func (t *Tier) RunMaxDepth() int64 {
	if v := t.RunLimit(MaxRunDepth); v != nil {
		return *v
	}
	return DefaultRunMaxDepth
}
