package policy

import "context"

// TierOf returns the tier a check of userID that names no tier is decided
// under, with the user's overrides applied: the tier their record assigns,
// else its account's tier, else the default tier. account names the
// account of a user whose record names none (see Request.Account). It records nothing and reads the user's record
// and the tier from the stores' memory where they keep them, as a
// recording check first does, so it may lag a moment behind a change
// another process made; the Decision's Tier of a check that follows is
// the confirmed one. The gateway finds with it, before checking a call,
// whether the user's tier includes the model called.
func (s *Service) TierOf(ctx context.Context, userID, account string) (Tier, error) {
	if userID == "" {
		userID = AnonymousUser
	}
	if err := ValidateUserID(userID); err != nil {
		return Tier{}, err
	}
	rec, _, err := s.userRecord(ctx, userID, true)
	if err != nil {
		return Tier{}, err
	}
	req := Request{Account: account}
	acct, _, err := s.accountOf(ctx, &req, rec, true)
	if err != nil {
		return Tier{}, err
	}
	name := s.tierName(&req, rec, acct)
	t, cached := Tier{}, false
	if !s.tiersUnconfirmable.Load() {
		t, cached = s.tiers.CachedTier(name)
	}
	if !cached {
		if t, err = s.readTier(ctx, name); err != nil {
			return Tier{}, err
		}
	}
	if rec != nil {
		t = t.WithOverrides(rec.Limits)
	}
	return t, nil
}
