package api

import (
	"bytes"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// priceJSON is a price entry on the wire: each entry of the body of PUT
// /v1/prices, of its answers and of a prices file. Amounts are dollars per
// million tokens as decimal strings ("0.15"), never JSON numbers, so that
// no reader takes them through floating point. In a body, input and output
// are required; cache_read and cache_write default to input (a cached
// token is never free unless the table says so); answers carry all four.
type priceJSON struct {
	Model      string  `json:"model"`
	Upstream   string  `json:"upstream,omitempty"`
	Input      *string `json:"input"`
	Output     *string `json:"output"`
	CacheRead  *string `json:"cache_read,omitempty"`
	CacheWrite *string `json:"cache_write,omitempty"`
}

// putPricesJSON is the body of PUT /v1/prices, and a prices file.
type putPricesJSON struct {
	EffectiveFrom *time.Time  `json:"effective_from,omitempty"`
	Prices        []priceJSON `json:"prices"`
}

// priceVersionJSON is a version of the price table as GET and PUT
// /v1/prices answer it.
type priceVersionJSON struct {
	ID            int64       `json:"id"`
	EffectiveFrom time.Time   `json:"effective_from"`
	CreatedAt     time.Time   `json:"created_at"`
	Source        string      `json:"source"`
	Prices        []priceJSON `json:"prices"`
}

// priceVersionSummaryJSON is an entry of GET /v1/prices/versions.
type priceVersionSummaryJSON struct {
	ID            int64     `json:"id"`
	EffectiveFrom time.Time `json:"effective_from"`
	CreatedAt     time.Time `json:"created_at"`
	Source        string    `json:"source"`
	Entries       int       `json:"entries"`
	InForce       bool      `json:"in_force"`
}

func priceToJSON(p policy.Price) priceJSON {
	str := func(m policy.Money) *string { s := m.String(); return &s }
	return priceJSON{Model: p.Model, Upstream: p.Upstream, Input: str(p.Input), Output: str(p.Output),
		CacheRead: str(p.CacheRead), CacheWrite: str(p.CacheWrite)}
}

func pricesToJSON(t *policy.PriceTable) []priceJSON {
	out := []priceJSON{}
	for _, p := range t.Entries() {
		out = append(out, priceToJSON(p))
	}
	return out
}

func versionToJSON(v policy.PriceVersion) priceVersionJSON {
	return priceVersionJSON{ID: v.ID, EffectiveFrom: v.EffectiveFrom.UTC(), CreatedAt: v.CreatedAt.UTC(), Source: v.Source, Prices: pricesToJSON(v.Prices)}
}

// pricesFromJSON reads the entries of a body or file, every amount
// checked: the error is EINVALID and names the first bad field,
// "prices[2].input".
func pricesFromJSON(in []priceJSON) ([]policy.Price, error) {
	out := make([]policy.Price, len(in))
	for i, j := range in {
		field := fmt.Sprintf("prices[%d].", i)
		p := policy.Price{Model: j.Model, Upstream: j.Upstream}
		amount := func(name string, s *string, dst *policy.Money) error {
			if s == nil {
				return policy.Errorf(policy.EINVALID, "%s%s is required", field, name)
			}
			m, err := policy.ParseMoney(*s)
			if err != nil {
				return policy.Errorf(policy.EINVALID, "%s%s: %s", field, name, policy.ErrorMessage(err))
			}
			if m < 0 {
				return policy.Errorf(policy.EINVALID, "%s%s must not be negative", field, name)
			}
			*dst = m
			return nil
		}
		if j.Model == "" {
			return nil, policy.Errorf(policy.EINVALID, "%smodel is required", field)
		}
		if err := amount("input", j.Input, &p.Input); err != nil {
			return nil, err
		}
		if err := amount("output", j.Output, &p.Output); err != nil {
			return nil, err
		}
		p.CacheRead, p.CacheWrite = p.Input, p.Input
		if j.CacheRead != nil {
			if err := amount("cache_read", j.CacheRead, &p.CacheRead); err != nil {
				return nil, err
			}
		}
		if j.CacheWrite != nil {
			if err := amount("cache_write", j.CacheWrite, &p.CacheWrite); err != nil {
				return nil, err
			}
		}
		out[i] = p
	}
	if errs := policy.ValidatePrices(out); len(errs) > 0 {
		return nil, policy.Errorf(policy.EINVALID, "%s", errs[0].Message)
	}
	return out, nil
}

// checkUpstreams refuses an entry naming an upstream the gateway does not
// have, when it has any: such an entry could never apply.
func (s *Server) checkUpstreams(prices []policy.Price) error {
	if len(s.upstreams) == 0 {
		return nil
	}
	for i, p := range prices {
		if p.Upstream != "" && !slices.Contains(s.upstreams, p.Upstream) {
			return policy.Errorf(policy.EINVALID, "prices[%d].upstream %s is not an upstream of the gateway (%s)",
				i, policy.Quote(p.Upstream), strings.Join(s.upstreams, ", "))
		}
	}
	return nil
}

func (s *Server) handlePutPrices(c echo.Context) error {
	var in putPricesJSON
	if err := readJSON(c.Request().Body, &in, strictOptions); err != nil {
		return err
	}
	if in.Prices == nil {
		return policy.Errorf(policy.EINVALID, "prices is required (an empty list makes a version that prices nothing)")
	}
	prices, err := pricesFromJSON(in.Prices)
	if err != nil {
		return err
	}
	if err := s.checkUpstreams(prices); err != nil {
		return err
	}
	v, err := s.svc.PutPrices(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), in.EffectiveFrom, prices)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, versionToJSON(v))
}

func (s *Server) handleGetPrices(c echo.Context) error {
	at := s.svc.Now()
	if v, given := c.QueryParams()["at"]; given {
		t, err := time.Parse(time.RFC3339Nano, v[0])
		if err != nil || len(v) > 1 {
			return policy.Errorf(policy.EINVALID, "at must be one RFC 3339 time such as 2026-12-01T00:00:00Z, not %s", policy.Quote(strings.Join(v, ",")))
		}
		at = t
	}
	v, err := s.svc.PricesAt(c.Request().Context(), at)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, versionToJSON(v))
}

func (s *Server) handleListPriceVersions(c echo.Context) error {
	versions, err := s.svc.PriceVersions(c.Request().Context())
	if err != nil {
		return err
	}
	current, found := policy.InForce(versions, s.svc.Now())
	out := make([]priceVersionSummaryJSON, len(versions))
	for i, v := range versions {
		out[i] = priceVersionSummaryJSON{ID: v.ID, EffectiveFrom: v.EffectiveFrom.UTC(), CreatedAt: v.CreatedAt.UTC(),
			Source: v.Source, Entries: v.Prices.Len(), InForce: found && v.ID == current.ID}
	}
	return c.JSON(http.StatusOK, map[string]any{"versions": out})
}

// A prices file is the body of PUT /v1/prices, so that a price table can
// live in a repository and be applied from a pipeline:
//
//	{"prices": [{"model": "gpt-4o-mini", "input": "0.15", "output": "0.6"}, ...]}
//
// policyguard prices export writes one (the version in force, without
// effective_from) and policyguard prices import applies one as a new
// version. Import also reads LiteLLM's model_prices_and_context_window.json
// as it is published: an object of models, each with per-token prices in
// dollars as JSON numbers (see readLiteLLM).

// PricesFile is what a prices file holds.
type PricesFile struct {
	// EffectiveFrom is when the version begins; nil for now.
	EffectiveFrom *time.Time
	Prices        []policy.Price
	// Format is "policyguard" or "litellm".
	Format string
	// Skipped counts the entries of a LiteLLM file left out, by why:
	// "mode image_generation", "no token prices".
	Skipped map[string]int
}

// SkippedTotal returns how many entries the file's reading left out.
func (f *PricesFile) SkippedTotal() int {
	n := 0
	for _, k := range f.Skipped {
		n += k
	}
	return n
}

// ReadPricesFile reads a prices file: the service's own format (an object
// with "prices"), or LiteLLM's. Errors are EINVALID and name the entry.
func ReadPricesFile(data []byte) (PricesFile, error) {
	var probe map[string]jsontext.Value
	if err := unmarshalObject(data, &probe, nil); err != nil {
		return PricesFile{}, err
	}
	if _, ours := probe["prices"]; ours {
		var in putPricesJSON
		if err := unmarshalObject(data, &in, strictOptions); err != nil {
			return PricesFile{}, err
		}
		prices, err := pricesFromJSON(in.Prices)
		if err != nil {
			return PricesFile{}, err
		}
		return PricesFile{EffectiveFrom: in.EffectiveFrom, Prices: prices, Format: "policyguard"}, nil
	}
	return readLiteLLM(probe)
}

// WritePricesFile writes the entries of t to w as a prices file, sorted by
// model then upstream, indented.
func WritePricesFile(w io.Writer, t *policy.PriceTable) error {
	b, err := json.Marshal(putPricesJSON{Prices: pricesToJSON(t)}, json.Deterministic(true), jsontext.WithIndent("  "))
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// liteLLMModes are the modes of LiteLLM entries priced per token of a
// conversation or completion, which the gateway meters; entries of other
// modes (embedding, image_generation, audio_*, rerank, ...) are skipped.
var liteLLMModes = []string{"chat", "completion", "responses"}

// liteLLMEntry is the part of a LiteLLM entry read: per-token prices in
// dollars. They are JSON numbers such as 1.25e-05, read as exact decimals
// (jsontext.Value, then big.Rat), never through a float64.
type liteLLMEntry struct {
	Mode          string         `json:"mode"`
	Provider      string         `json:"litellm_provider"`
	Input         jsontext.Value `json:"input_cost_per_token"`
	Output        jsontext.Value `json:"output_cost_per_token"`
	CacheRead     jsontext.Value `json:"cache_read_input_token_cost"`
	CacheCreation jsontext.Value `json:"cache_creation_input_token_cost"`
}

// readLiteLLM reads LiteLLM's price file: every entry of a chat- or
// completion-like mode with input and output per-token prices becomes a
// generic entry (no upstream) of its model, per million tokens; a missing
// cache price is the input price, as in a body. "sample_spec", the file's
// own documentation, entries of other modes, entries without token prices
// and entries whose names the table refuses are skipped and counted.
func readLiteLLM(entries map[string]jsontext.Value) (PricesFile, error) {
	f := PricesFile{Format: "litellm", Skipped: map[string]int{}}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "sample_spec" {
			f.Skipped["sample_spec"]++
			continue
		}
		var e liteLLMEntry
		if err := json.Unmarshal(entries[name], &e); err != nil {
			return PricesFile{}, policy.Errorf(policy.EINVALID, "LiteLLM entry %s: %s", policy.Quote(name), err)
		}
		if !slices.Contains(liteLLMModes, e.Mode) {
			mode := e.Mode
			if mode == "" {
				mode = "none"
			}
			f.Skipped["mode "+mode]++
			continue
		}
		if len(e.Input) == 0 || len(e.Output) == 0 {
			f.Skipped["no token prices"]++
			continue
		}
		p := policy.Price{Model: name}
		var err error
		for _, c := range []struct {
			field string
			raw   jsontext.Value
			dst   *policy.Money
		}{
			{"input_cost_per_token", e.Input, &p.Input},
			{"output_cost_per_token", e.Output, &p.Output},
			{"cache_read_input_token_cost", e.CacheRead, &p.CacheRead},
			{"cache_creation_input_token_cost", e.CacheCreation, &p.CacheWrite},
		} {
			if len(c.raw) == 0 {
				*c.dst = p.Input
				continue
			}
			if *c.dst, err = perMillion(c.raw); err != nil {
				return PricesFile{}, policy.Errorf(policy.EINVALID, "LiteLLM entry %s: %s: %s", policy.Quote(name), c.field, policy.ErrorMessage(err))
			}
		}
		// A name the table refuses (over 128 bytes, a space, a '*' inside)
		// leaves out its entry, not the whole file.
		if errs := policy.ValidatePrices([]policy.Price{p}); len(errs) > 0 {
			f.Skipped["unusable model name"]++
			continue
		}
		f.Prices = append(f.Prices, p)
	}
	if errs := policy.ValidatePrices(f.Prices); len(errs) > 0 {
		// Name the model, not an index into a list the file does not have.
		return PricesFile{}, policy.Errorf(policy.EINVALID, "LiteLLM file: %s", errs[0].Message)
	}
	return f, nil
}

// perMillion reads a JSON number of dollars per token as Money per million
// tokens, exactly: a price finer than a picodollar per million tokens, or
// negative, is an error, never rounded.
func perMillion(raw jsontext.Value) (policy.Money, error) {
	text := string(bytes.TrimSpace(raw))
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return 0, policy.Errorf(policy.EINVALID, "%s is not a number", policy.Quote(text))
	}
	// Picodollars per million tokens = dollars per token × 10^18.
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)))
	switch {
	case r.Sign() < 0:
		return 0, policy.Errorf(policy.EINVALID, "%s is negative", text)
	case !r.IsInt():
		return 0, policy.Errorf(policy.EINVALID, "%s is finer than a picodollar per million tokens", text)
	case !r.Num().IsInt64():
		return 0, policy.Errorf(policy.EINVALID, "%s per token is more than %s per million", text, policy.MaxMoney)
	}
	return policy.Money(r.Num().Int64()), nil
}
