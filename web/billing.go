package web

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/policyguard/policyguard/policy"
)

// The billing cycle on the record and account forms: a time zone and an
// anchor day, each empty to keep the default, read and refused in the
// words of the JSON API.

// billingFields returns the form's time zone and anchor fields, with ids
// prefixed by prefix; keeps says where an empty one is taken from.
func billingFields(prefix string, form url.Values, errs map[string]string, keeps string) []adminField {
	return []adminField{
		{ID: prefix + "-time-zone", Name: "time_zone", Label: "Time zone", Value: form.Get("time_zone"), Error: errs["time_zone"],
			Hint: "The IANA time zone of the billing periods, such as Europe/Berlin; empty keeps " + keeps + "."},
		{ID: prefix + "-billing-anchor", Name: "billing_anchor", Label: "Billing day", Value: form.Get("billing_anchor"), InputMode: "numeric",
			Error: errs["billing_anchor"], Hint: "The day of the month billing periods start on, 1 to 31 (the last day of a shorter month); empty keeps " + keeps + "."},
	}
}

// billingFromForm reads the time zone and anchor of form, "" and 0 where
// empty; a bad anchor's message goes in errs (a bad zone is the record's
// or account's own validation to find).
func billingFromForm(form url.Values, errs map[string]string) (zone string, anchor int) {
	zone = strings.TrimSpace(form.Get("time_zone"))
	if raw := strings.TrimSpace(form.Get("billing_anchor")); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > policy.MaxBillingAnchor {
			errs["billing_anchor"] = "billing_anchor must be an integer from 1 to 31"
		} else {
			anchor = n
		}
	}
	return zone, anchor
}

// setBillingValues sets the form values of a stored zone and anchor.
func setBillingValues(form url.Values, zone string, anchor int) {
	form.Set("time_zone", zone)
	if anchor != 0 {
		form.Set("billing_anchor", strconv.Itoa(anchor))
	}
}

// periodText words a billing period: "1 Mar 2026 00:00 to 1 Apr 2026 00:00,
// America/New_York, billing day 1".
func periodText(p policy.Period) string {
	const layout = "2 Jan 2006 15:04"
	return p.Start.Format(layout) + " to " + p.End.Format(layout) + ", " + p.TimeZone + ", billing day " + strconv.Itoa(p.Anchor)
}
