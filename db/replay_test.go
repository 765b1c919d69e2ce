package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// A preview reads users in chunks; users on either side of a chunk's end
// are each replayed whole, once, in order.
func TestReplayRequestsAcrossChunks(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		f := newPreviewFixtureOf(t, 1250, 20) // two and a half chunks
		ctx := context.Background()
		p, err := f.svc.PreviewTier(ctx, benchTier.Name, previewLimits)
		if err != nil {
			t.Fatal(err)
		}
		// Each user's bursts of ten: the last five of each are refused.
		if p.Users != 1250 || p.Requests != 1250*20 || p.RequestsRefused != 1250*10 || p.UsersRefused != 1250 || p.RefusedBy[policy.Minute] != 1250*10 {
			t.Fatalf("preview = %+v", p)
		}
		if len(p.TopUsers) != policy.MaxTopUsers || p.TopUsers[0].UserID != "user-00000" || p.TopUsers[9].UserID != "user-00009" {
			t.Fatalf("top users %+v, want the first ten by id (all tie)", p.TopUsers)
		}
		// Rows of other tiers and rows out of the day are left out.
		other, err := f.svc.PreviewTier(ctx, "free", previewLimits)
		if err != nil || other.Requests != 0 {
			t.Fatalf("preview of free = %+v, %v", other, err)
		}
		f.now = f.now.Add(24 * time.Hour)
		if p, err := f.svc.PreviewTier(ctx, benchTier.Name, previewLimits); err != nil || p.Requests != 0 {
			t.Fatalf("a day later: %+v, %v", p, err)
		}
	})
}
