package api

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/policy"
)

// Outcome label values of policyguard_checks_total.
const (
	outcomeAdmitted    = "admitted"     // every guardrail let it through
	outcomeRateLimited = "rate_limited" // a window is full; the window label says which
	outcomeDenied      = "denied"       // refused as it stands, such as a feature outside the plan
	outcomeInvalid     = "invalid"      // no decision: unknown tier or over-long user id
	outcomeError       = "error"        // no decision: storage or internal failure
)

// Storage operations counted by policyguard_storage_errors_total.
var storageOperations = []string{"tier", "tiers", "update_tiers", "tier_changes", "admit", "view", "forget", "cleanup", "ping"}

// Metrics holds the service's Prometheus metrics, all named policyguard_*.
// Its methods are safe for concurrent use.
//
// Labels never carry a user id: tier names are set by the admin and stay
// few, and a check that named an unknown tier is counted without one.
type Metrics struct {
	reg *prometheus.Registry

	checks        *prometheus.CounterVec
	checkCounters sync.Map // checkKey -> *checkCounter, resolved once per label set
	lastCheck     atomic.Pointer[checkCounter]
	checkDuration [2]prometheus.Observer
	rowsStored    prometheus.Counter
	rowsDeleted   prometheus.Counter
	storageErrors map[string]prometheus.Counter
	failOpen      prometheus.Counter

	callsOpened   prometheus.Counter
	callsFinished prometheus.Counter
	callsExpired  prometheus.Counter
	tokensSettled prometheus.Counter
	spend         *prometheus.CounterVec
	spendOverrun  *prometheus.CounterVec
	runsOpened    prometheus.Counter
	runsRefused   *prometheus.CounterVec
	inFlight      atomic.Pointer[func(context.Context) (int64, error)]
	shadow        *prometheus.CounterVec
	shadowCounts  sync.Map // shadowKey -> prometheus.Counter

	gatewayRequests *prometheus.CounterVec
	gatewayTokens   *prometheus.CounterVec
	upstreamLatency *prometheus.HistogramVec
	gatewayDrained  *prometheus.CounterVec
}

// shadowKey is one label set of policyguard_shadow_refusals_total.
type shadowKey struct {
	tier   string
	window policy.Window
	// account is set for the pooled shadow limits of an account.
	account bool
}

// checkKey is one label set of policyguard_checks_total.
type checkKey struct {
	tier, guardrail, outcome string
	window                   int8 // index into refusalWindows, -1 for none
	dryRun                   bool
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors: a registry of its own rather than Prometheus's global one, so
// that each Server (and each test) counts only its own requests.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// NewMetrics registers the service's metrics in reg and returns them. A nil
// reg means a new one from NewRegistry. It panics if reg already holds them.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = NewRegistry()
	}
	m := &Metrics{
		reg: reg,
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyguard_checks_total",
			Help: "Checks answered, by tier, the guardrail that decided, outcome (admitted, rate_limited, denied, invalid, error), the window that was full when rate limited (account when an account's pooled limits refused), and whether it was a dry run.",
		}, []string{"tier", "guardrail", "outcome", "window", "dry_run"}),
		rowsStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "policyguard_rows_stored_total",
			Help: "Admitted requests recorded in the database (admitted checks that were not dry runs).",
		}),
		rowsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "policyguard_cleanup_rows_deleted_total",
			Help: "Rows deleted by the background cleanup: those older than the longest window and an hour more (policy.KeepFor).",
		}),
		storageErrors: make(map[string]prometheus.Counter, len(storageOperations)),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyguard_shadow_refusals_total",
			Help: "Checks (not dry runs) a tier's shadow limits would have refused, by tier and the first window that was full under them (account for the pooled shadow limits of the member's account). Shadow limits refuse nothing.",
		}, []string{"tier", "window"}),
		failOpen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "policyguard_fail_open_admissions_total",
			Help: "Checks admitted without a decision because storage failed and fail-open is set; nothing was recorded for them.",
		}),
	}
	m.callsOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "policyguard_calls_opened_total",
		Help: "Calls opened: checks admitted under a tier that limits tokens or concurrent calls, not dry runs.",
	})
	m.callsFinished = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "policyguard_calls_finished_total",
		Help: "Calls finished by their caller (POST /v1/calls/{call_id}/finish or Guard) before they expired; retries of a finish are not counted again.",
	})
	m.callsExpired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "policyguard_calls_expired_total",
		Help: "Finishes answered for calls the service had already finished at their expiry, with their reservation, because no finish or keepalive came in time.",
	})
	m.tokensSettled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "policyguard_tokens_settled_total",
		Help: "Tokens counted by calls their caller finished before they expired: the count reported, or the reservation when none was.",
	})
	m.spend = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyguard_spend_dollars_total",
		Help: "US dollars counted by priced calls their caller finished before they expired, by tier: the usage or tokens reported, at the price in force when each was admitted.",
	}, []string{"tier"})
	m.spendOverrun = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyguard_spend_overrun_dollars_total",
		Help: "US dollars that priced calls finished by their caller cost above what their check reserved, by tier: the one way spend passes a spend limit.",
	}, []string{"tier"})
	m.runsOpened, m.runsRefused = runMetrics()
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "policyguard_calls_in_flight",
		Help: "Calls open now, over every user: read from storage at each scrape; NaN when no store was given (SetCallsInFlight) or it failed.",
	}, m.callsInFlight)
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "policyguard_check_duration_seconds",
		Help: "Time from receiving a check to its decision, including the durable commit of an admitted request.",
		// From a cached read to a commit waiting behind a busy disk.
		Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
	}, []string{"dry_run"})
	m.checkDuration[0] = duration.WithLabelValues("false")
	m.checkDuration[1] = duration.WithLabelValues("true")
	storageErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyguard_storage_errors_total",
		Help: "Storage operations that failed, by operation.",
	}, []string{"operation"})
	for _, op := range storageOperations {
		m.storageErrors[op] = storageErrors.WithLabelValues(op)
	}
	m.gatewayRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyguard_gateway_requests_total",
		Help: "Requests to the gateway (/llm/...), by upstream, tier (empty before the user is known) and outcome: forwarded (the upstream answered, whatever its status), upstream_failed (it did not), rate_limited, denied, model_denied (the tier does not include the model), unauthorized, bad_request (400, 404 or 413) or error.",
	}, []string{"upstream", "tier", "outcome"})
	m.gatewayTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyguard_gateway_tokens_total",
		Help: "Tokens the gateway charged calls, by upstream and tier: what the upstream reported, or the reservation when it reported nothing before the exchange ended.",
	}, []string{"upstream", "tier"})
	m.upstreamLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "policyguard_gateway_upstream_latency_seconds",
		Help:    "Time from sending a request upstream to the upstream's status and header fields, by upstream.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"upstream"})
	m.gatewayDrained = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyguard_gateway_drained_total",
		Help: "Upstream exchanges (streams, mostly) whose client went away before the end, which the gateway read on for at most -gateway-drain to learn the usage, by upstream and what settled them: usage (the upstream's count) or reservation (none came in time).",
	}, []string{"upstream", "settled"})
	reg.MustRegister(m.checks, duration, m.rowsStored, m.rowsDeleted, storageErrors, m.failOpen,
		m.callsOpened, m.callsFinished, m.callsExpired, m.tokensSettled, m.spend, m.spendOverrun, m.runsOpened, m.runsRefused, inFlight, m.shadow,
		m.gatewayRequests, m.gatewayTokens, m.upstreamLatency, m.gatewayDrained)
	return m
}

// gatewayMetrics records what the gateway does in Metrics.
type gatewayMetrics struct{ m *Metrics }

var _ gateway.Metrics = gatewayMetrics{}

func (g gatewayMetrics) ObserveCheck(d *policy.Decision, err error, took time.Duration) {
	g.m.observeCheck(d, err, false, took)
}

func (g gatewayMetrics) ObserveFinish(call *policy.Call, err error, before time.Time) {
	g.m.observeFinish(call, err, before)
}

// ObserveRequest counts one request to the gateway. Its labels are few:
// the upstreams and tiers the operator configured, and the outcomes.
func (g gatewayMetrics) ObserveRequest(upstream, tier, outcome string) {
	g.m.gatewayRequests.WithLabelValues(upstream, tier, outcome).Inc()
}

// ObserveSettle counts the tokens a gateway call was charged, and an
// exchange drained after its client went away, settled with the
// upstream's usage or not.
func (g gatewayMetrics) ObserveSettle(upstream, tier string, tokens int64, drained, usage bool) {
	if tokens > 0 {
		g.m.gatewayTokens.WithLabelValues(upstream, tier).Add(float64(tokens))
	}
	if drained {
		settled := "reservation"
		if usage {
			settled = "usage"
		}
		g.m.gatewayDrained.WithLabelValues(upstream, settled).Inc()
	}
}

// ObserveUpstreamLatency records the time an upstream took to answer.
func (g gatewayMetrics) ObserveUpstreamLatency(upstream string, took time.Duration) {
	g.m.upstreamLatency.WithLabelValues(upstream).Observe(took.Seconds())
}

// SetCallsInFlight gives policyguard_calls_in_flight its source: a function,
// such as a db.Store's CallsInFlight at the service clock's now, asked at
// each scrape. Until it is set the gauge reads NaN.
func (m *Metrics) SetCallsInFlight(count func(context.Context) (int64, error)) {
	m.inFlight.Store(&count)
}

// callsInFlight reads the gauge, within a second so that a slow store never
// holds a scrape up for long.
func (m *Metrics) callsInFlight() float64 {
	count := m.inFlight.Load()
	if count == nil {
		return math.NaN()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := (*count)(ctx)
	m.storageError("view", err)
	if err != nil {
		return math.NaN()
	}
	return float64(n)
}

// observeFinish counts one finish of call: those that found the call open,
// with its tokens and, when priced, its cost and overrun; or expired. before is the service clock as the finish
// began: a call finished before it was finished by an earlier request,
// and this one is a retry. (A retry at the very microsecond of the first
// finish, which only a stopped test clock allows, counts again.)
func (m *Metrics) observeFinish(call *policy.Call, err error, before time.Time) {
	switch {
	case err != nil:
	case call.Expired:
		m.callsExpired.Inc()
	case !call.FinishedAt.Before(before.Truncate(policy.Resolution)):
		m.callsFinished.Inc()
		m.tokensSettled.Add(float64(call.Tokens))
		if call.Price != nil {
			m.spend.WithLabelValues(call.Tier).Add(dollars(call.Cost))
			m.spendOverrun.WithLabelValues(call.Tier).Add(dollars(call.Overrun()))
		}
	}
}

// dollars returns m in dollars, as metrics count them: a float64, which
// keeps every picodollar of amounts below about $9,000 (2^53 of them) and
// is the closest double beyond. Only the metrics round; the service counts
// Money.
func dollars(m policy.Money) float64 { return float64(m) / 1e12 }

// Handler returns the handler of GET /metrics for the registry the metrics
// are in.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveCleanup counts one cleanup run: the rows it deleted and, when it
// failed on storage, one storage error. It fits db.Store.PruneEvery.
func (m *Metrics) ObserveCleanup(deleted int64, err error) {
	if deleted > 0 {
		m.rowsDeleted.Add(float64(deleted))
	}
	m.storageError("cleanup", err)
}

// storageError counts err if it is a storage failure. Context ends and
// domain answers (not found, conflict) are not failures of storage.
func (m *Metrics) storageError(op string, err error) {
	if err != nil && policy.ErrorCode(err) == policy.EUNAVAILABLE {
		m.storageErrors[op].Inc()
	}
}

// observeCheck counts one answered check: d when err is nil, otherwise the
// failure. It costs a lookup of a pre-resolved counter and a few atomic adds.
func (m *Metrics) observeCheck(d *policy.Decision, err error, dryRun bool, took time.Duration) {
	k := checkKey{window: -1, dryRun: dryRun}
	switch {
	case err != nil:
		k.outcome = outcomeError
		if policy.ErrorCode(err) == policy.EINVALID {
			k.outcome = outcomeInvalid
		}
	default:
		k.tier, k.guardrail = d.Tier, d.Guardrail
		switch d.Outcome {
		case policy.Admitted:
			k.outcome = outcomeAdmitted
			if !dryRun {
				m.rowsStored.Inc()
			}
			if d.CallID != "" {
				m.callsOpened.Inc()
			}
		case policy.RateLimited:
			k.outcome = outcomeRateLimited
			k.window = blockedWindow(d)
		default:
			k.outcome = outcomeDenied
		}
	}
	m.checkCounter(k).Inc()
	if err == nil && !dryRun && d.Run != nil {
		switch {
		case d.RunRefused != policy.CauseNone:
			m.runsRefused.WithLabelValues(string(d.RunRefused)).Inc()
		case d.Allowed() && d.Run.Requests == 1:
			// The named run's first request: a later one, or a
			// child's, counts it past 1.
			m.runsOpened.Inc()
		}
	}
	if err == nil && !dryRun && d.Shadow != nil && !d.Shadow.Allowed {
		m.observeShadowRefusal(d.Tier, d.Shadow)
	}
	if dryRun {
		m.checkDuration[1].Observe(took.Seconds())
	} else {
		m.checkDuration[0].Observe(took.Seconds())
	}
}

// checkCounter returns the counter of label set k, resolved once. The
// counter of the last label set asked for is kept beside the map: under
// load most checks share one label set, and comparing it costs a fifth
// of the map's lookup, which hashes the three strings (sync.Map.Load was
// 0.65% of the service's CPU under wrk).
func (m *Metrics) checkCounter(k checkKey) prometheus.Counter {
	if last := m.lastCheck.Load(); last != nil && last.key == k {
		return last.counter
	}
	e, ok := m.checkCounters.Load(k)
	if !ok {
		window := ""
		if k.window >= 0 {
			window = refusalWindows[k.window]
		}
		dry := "false"
		if k.dryRun {
			dry = "true"
		}
		e, _ = m.checkCounters.LoadOrStore(k, &checkCounter{k, m.checks.WithLabelValues(k.tier, k.guardrail, k.outcome, window, dry)})
	}
	last := e.(*checkCounter)
	m.lastCheck.Store(last)
	return last.counter
}

// checkCounter is one resolved label set of policyguard_checks_total.
type checkCounter struct {
	key     checkKey
	counter prometheus.Counter
}

// observeShadowRefusal counts one check the shadow limits of tier would
// have refused as sd says, under the window label the statistics count it
// by (see policy.ShadowDecision.CountReason).
func (m *Metrics) observeShadowRefusal(tier string, sd *policy.ShadowDecision) {
	k := shadowKey{tier, sd.Blocked, sd.Account}
	c, ok := m.shadowCounts.Load(k)
	if !ok {
		window := strings.TrimPrefix(sd.CountReason(), policy.CountShadowPrefix)
		c, _ = m.shadowCounts.LoadOrStore(k, m.shadow.WithLabelValues(tier, window))
	}
	c.(prometheus.Counter).Inc()
}

// rateLimiterName is the name of the guardrail whose refusals name a window.
var rateLimiterName = (*policy.RateLimiter)(nil).Name()

// refusalWindows are the values of the window label of a rate-limited
// check: the request windows, then the limits of metered tiers, then any
// of an account's pooled limits (the reason policy.CountAccount, as the
// stats count it).
var refusalWindows = [...]string{"minute", "hour", "day", "concurrency", "tokens_minute", "tokens_hour", "tokens_day",
	"spend_minute", "spend_hour", "spend_day", policy.CountAccount}

// accountRefusal is the index of policy.CountAccount in refusalWindows.
const accountRefusal = int8(len(refusalWindows) - 1)

// blockedWindow returns the index in refusalWindows of the limit that
// refused d: an account's pooled limits by the reason's prefix, a metered
// limit by its reason, else the first request window, in check order,
// with nothing remaining, as policy.Evaluate picks it. It is -1 when
// another guardrail refused.
func blockedWindow(d *policy.Decision) int8 {
	if d.Guardrail != rateLimiterName || d.Windows == nil {
		return -1
	}
	if strings.HasPrefix(d.Reason, policy.AccountReasonPrefix) {
		// The member's own windows have room: without this it would
		// count under no window, or a full one that did not refuse.
		return accountRefusal
	}
	if d.Reason == policy.ConcurrencyReason {
		return 3
	}
	if k, ok := d.RefusedBy(); ok && (k == policy.KindTokens || k == policy.KindCost) {
		for i, w := range policy.Windows {
			switch d.Reason {
			case w.TokenReason():
				return int8(4 + i)
			case w.SpendReason():
				return int8(7 + i)
			}
		}
	}
	for i, w := range d.Windows {
		if w.Remaining == 0 {
			return int8(i)
		}
	}
	return -1
}

// MeterStorage returns tiers and requests wrapped so that the storage
// failures of each of their methods count in
// policyguard_storage_errors_total, by operation. Methods a later version of
// the interfaces adds pass through uncounted. The wrappers add one call per
// operation and nothing else.
func (m *Metrics) MeterStorage(tiers policy.TierStore, requests policy.RequestStore) (policy.TierStore, policy.RequestStore) {
	return meteredTiers{tiers, m}, meteredRequests{requests, m}
}

// meteredTiers counts the failures of the methods that read or write
// storage; CachedTier, which reads memory, passes through the embedding.
type meteredTiers struct {
	policy.TierStore
	m *Metrics
}

func (s meteredTiers) Tier(ctx context.Context, name string) (policy.Tier, error) {
	t, err := s.TierStore.Tier(ctx, name)
	s.m.storageError("tier", err)
	return t, err
}

func (s meteredTiers) Tiers(ctx context.Context) ([]policy.Tier, error) {
	ts, err := s.TierStore.Tiers(ctx)
	s.m.storageError("tiers", err)
	return ts, err
}

func (s meteredTiers) UpdateTiers(ctx context.Context, u policy.TierUpdate) ([]policy.TierChange, error) {
	changes, err := s.TierStore.UpdateTiers(ctx, u)
	s.m.storageError("update_tiers", err)
	return changes, err
}

func (s meteredTiers) TierChanges(ctx context.Context, limit int) ([]policy.TierChange, error) {
	changes, err := s.TierStore.TierChanges(ctx, limit)
	s.m.storageError("tier_changes", err)
	return changes, err
}

type meteredRequests struct {
	policy.RequestStore
	m *Metrics
}

func (s meteredRequests) Admit(ctx context.Context, userID string, decide func(policy.History) (policy.Admission, error)) error {
	err := s.RequestStore.Admit(ctx, userID, decide)
	s.m.storageError("admit", err)
	return err
}

// AdmitPlanned implements policy.Planner: a store that plans its
// admissions keeps doing so behind the wrapper, and one that does not
// admits as Admit does.
func (s meteredRequests) AdmitPlanned(ctx context.Context, userID string, p *policy.Plan, decide func(policy.History) (policy.Admission, error)) error {
	var err error
	if pl, ok := s.RequestStore.(policy.Planner); ok {
		err = pl.AdmitPlanned(ctx, userID, p, decide)
	} else {
		err = s.RequestStore.Admit(ctx, userID, decide)
	}
	s.m.storageError("admit", err)
	return err
}

// AdmitPooled implements policy.PoolStore for a store that does.
func (s meteredRequests) AdmitPooled(ctx context.Context, poolKey, userID string, decide func(pool, own policy.History) (policy.Admission, policy.Admission, error)) error {
	ps, ok := s.RequestStore.(policy.PoolStore)
	if !ok {
		return policy.Errorf(policy.EINTERNAL, "this request store cannot count an account's pooled limits")
	}
	err := ps.AdmitPooled(ctx, poolKey, userID, decide)
	s.m.storageError("admit", err)
	return err
}

// Periods implements policy.PeriodLister for a store that does.
func (s meteredRequests) Periods(ctx context.Context, key string, before time.Time, limit int) ([]policy.PeriodTotals, error) {
	pl, ok := s.RequestStore.(policy.PeriodLister)
	if !ok {
		return nil, policy.Errorf(policy.EINTERNAL, "this request store keeps no billing periods")
	}
	periods, err := pl.Periods(ctx, key, before, limit)
	s.m.storageError("periods", err)
	return periods, err
}

func (s meteredRequests) View(ctx context.Context, userID string, fn func(policy.History) error) error {
	err := s.RequestStore.View(ctx, userID, fn)
	s.m.storageError("view", err)
	return err
}

func (s meteredRequests) Forget(ctx context.Context, userID string) error {
	err := s.RequestStore.Forget(ctx, userID)
	s.m.storageError("forget", err)
	return err
}

// runStore returns the store's runs, or an error when it keeps none.
func (s meteredRequests) runStore() (policy.RunStore, error) {
	rs, ok := s.RequestStore.(policy.RunStore)
	if !ok {
		return nil, policy.Errorf(policy.EINTERNAL, "this request store does not keep runs")
	}
	return rs, nil
}

// GetRun implements policy.RunStore for a store that does.
func (s meteredRequests) GetRun(ctx context.Context, id string, now time.Time) (policy.Run, error) {
	rs, err := s.runStore()
	if err != nil {
		return policy.Run{}, err
	}
	r, err := rs.GetRun(ctx, id, now)
	s.m.storageError("view", err)
	return r, err
}

// ListRuns implements policy.RunStore for a store that does.
func (s meteredRequests) ListRuns(ctx context.Context, f policy.RunFilter, now time.Time) ([]policy.Run, error) {
	rs, err := s.runStore()
	if err != nil {
		return nil, err
	}
	runs, err := rs.ListRuns(ctx, f, now)
	s.m.storageError("view", err)
	return runs, err
}

// EndRun implements policy.RunStore for a store that does.
func (s meteredRequests) EndRun(ctx context.Context, id string, now time.Time, expired func(policy.Run) policy.RunCause) (policy.Run, error) {
	rs, err := s.runStore()
	if err != nil {
		return policy.Run{}, err
	}
	r, err := rs.EndRun(ctx, id, now, expired)
	s.m.storageError("admit", err)
	return r, err
}

// runMetrics returns the counters of agent runs: runs opened, and checks
// a run refused by what refused them.
func runMetrics() (prometheus.Counter, *prometheus.CounterVec) {
	return prometheus.NewCounter(prometheus.CounterOpts{
			Name: "policyguard_runs_opened_total",
			Help: "Agent runs opened: checks admitted as the first request of a run (context.run_id), not dry runs.",
		}), prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyguard_runs_refused_total",
			Help: "Checks refused by a run's budget or state, by limit: requests, tokens, cost, duration, idle, concurrency, depth, ended or parent.",
		}, []string{"limit"})
}
