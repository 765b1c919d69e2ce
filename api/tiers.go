package api

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// tierJSON is a tier on the wire: the answers and bodies of /v1/tiers,
// each entry of a tiers file, and the before and after of a change on the
// admin page. UpdatedAt is left out when zero: a tiers file and a change
// leave it zero, so that a file kept in a repository changes only when a
// tier does; a body may carry it, so that an answer can be sent back as
// is, and the server then sets the time of the change.
type tierJSON struct {
	Name              string `json:"name"`
	RequestsPerMinute int64  `json:"requests_per_minute"`
	RequestsPerHour   int64  `json:"requests_per_hour"`
	RequestsPerDay    int64  `json:"requests_per_day"`
	BurstAllowance    int64  `json:"burst_allowance"`
	// The metering limits: null (or absent from a body) sets no limit.
	TokensPerMinute *int64    `json:"tokens_per_minute"`
	TokensPerHour   *int64    `json:"tokens_per_hour"`
	TokensPerDay    *int64    `json:"tokens_per_day"`
	MaxConcurrent   *int64    `json:"max_concurrent"`
	Features        []string  `json:"features"`               // nil is written []
	Models          []string  `json:"models,format:emitnull"` // null (or absent from a body) for any model
	Description     string    `json:"description"`
	UpdatedAt       time.Time `json:"updated_at,omitzero"`
	// Shadow is left out when the tier has none, so that a tiers file
	// without shadow limits reads as before; a body may send it null.
	Shadow *limitsJSON `json:"shadow,omitzero"`
	// Account is the pooled limits of an account on the tier, left out
	// when it has none; each limit null (or absent) for none.
	Account *poolJSON `json:"account,omitzero"`
}

// poolJSON is the pooled limits of an account on a tier: every limit of a
// tier, each optional.
type poolJSON struct {
	RequestsPerMinute *int64 `json:"requests_per_minute"`
	RequestsPerHour   *int64 `json:"requests_per_hour"`
	RequestsPerDay    *int64 `json:"requests_per_day"`
	BurstAllowance    *int64 `json:"burst_allowance"`
	TokensPerMinute   *int64 `json:"tokens_per_minute"`
	TokensPerHour     *int64 `json:"tokens_per_hour"`
	TokensPerDay      *int64 `json:"tokens_per_day"`
	MaxConcurrent     *int64 `json:"max_concurrent"`
}

// limitsJSON is the request limits of a tier's shadow: all four required,
// and the pooled shadow limits of its accounts, left out when it has none.
type limitsJSON struct {
	RequestsPerMinute int64 `json:"requests_per_minute"`
	RequestsPerHour   int64 `json:"requests_per_hour"`
	RequestsPerDay    int64 `json:"requests_per_day"`
	BurstAllowance    int64 `json:"burst_allowance"`
	// Account is left out when the shadow has none; a body may send it
	// null.
	Account *shadowPoolJSON `json:"account,omitzero"`
}

// shadowPoolJSON is the pooled shadow limits of a tier's accounts: the
// request limits of poolJSON, each optional.
type shadowPoolJSON struct {
	RequestsPerMinute *int64 `json:"requests_per_minute"`
	RequestsPerHour   *int64 `json:"requests_per_hour"`
	RequestsPerDay    *int64 `json:"requests_per_day"`
	BurstAllowance    *int64 `json:"burst_allowance"`
}

// tierWire, shadowWire, poolWire and shadowPoolWire find each limit of
// policy.LimitFields in the wire types by its JSON name, so that the
// conversions below walk the table: a limit is added to a wire type as a
// field, and nowhere else here.
var (
	tierWire       = bindWire[tierJSON](func(*policy.LimitField) bool { return true })
	shadowWire     = bindWire[limitsJSON]((*policy.LimitField).InRequestLimits)
	poolWire       = bindWire[poolJSON](nil)
	shadowPoolWire = bindPoolWire[shadowPoolJSON]((*policy.LimitField).InRequestLimits)
)

func tierToJSON(t policy.Tier) tierJSON {
	j := tierJSON{Name: t.Name, Features: t.Features, Models: t.Models, Description: t.Description, UpdatedAt: t.UpdatedAt.UTC()}
	for i := range policy.LimitFields {
		tierWire.set(&j, i, policy.LimitFields[i].Get(&t))
	}
	if l := t.Shadow; l != nil {
		j.Shadow = &limitsJSON{}
		if l.Account != nil {
			j.Shadow.Account = &shadowPoolJSON{}
		}
		for i := range policy.LimitFields {
			if policy.LimitFields[i].InRequestLimits() {
				shadowWire.set(j.Shadow, i, l.Limits[i])
			}
			if l.Account != nil {
				shadowPoolWire.set(j.Shadow.Account, i, l.Account.Get(&policy.LimitFields[i]))
			}
		}
	}
	if p := t.Account; p != nil {
		j.Account = &poolJSON{}
		for i := range policy.LimitFields {
			poolWire.set(j.Account, i, p.Get(&policy.LimitFields[i]))
		}
	}
	return j
}

// tierFields are a tier's fields in the order their problems are listed.
var tierFields = func() []string {
	fields := append([]string{"name"}, policy.LimitNames[:]...)
	fields = append(fields, "features", "models", "description", "shadow")
	for i := range policy.LimitFields {
		if f := &policy.LimitFields[i]; f.InRequestLimits() {
			fields = append(fields, "shadow."+f.Name)
		}
	}
	fields = append(fields, "shadow.account")
	for i := range policy.LimitFields {
		if f := &policy.LimitFields[i]; f.InRequestLimits() {
			fields = append(fields, "shadow.account."+f.Name)
		}
	}
	fields = append(fields, "account")
	for _, name := range policy.LimitNames {
		fields = append(fields, "account."+name)
	}
	return fields
}()

// wireBinding is where each limit of policy.LimitFields lives in a wire
// struct type: field[i] is the index of LimitFields[i]'s field, -1 for
// none.
type wireBinding struct{ field []int }

// bindWire binds the limits of policy.LimitFields that want reports to the
// fields of the struct type T that their JSON names tag: int64 for a
// required limit, *int64 for an optional one; with want nil, every limit,
// each as *int64 (a pool's limits are all optional). A limit missing from T, or of
// the wrong type, panics when the program starts, so that no test passes
// while a wire type lacks a limit of the table.
func bindWire[T any](want func(*policy.LimitField) bool) wireBinding {
	if want == nil {
		return bindWireOf[T](func(*policy.LimitField) bool { return true }, true)
	}
	return bindWireOf[T](want, false)
}

// bindPoolWire is bindWire for the limits of a pool that want reports,
// each as *int64.
func bindPoolWire[T any](want func(*policy.LimitField) bool) wireBinding {
	return bindWireOf[T](want, true)
}

// bindWireOf binds the limits want reports, each as *int64 when pooled.
func bindWireOf[T any](want func(*policy.LimitField) bool, pooled bool) wireBinding {
	typ := reflect.TypeFor[T]()
	byName := make(map[string]reflect.StructField)
	for _, sf := range reflect.VisibleFields(typ) {
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		byName[name] = sf
	}
	b := wireBinding{field: make([]int, len(policy.LimitFields))}
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		b.field[i] = -1
		if !want(f) {
			continue
		}
		sf, ok := byName[f.Name]
		wantType := reflect.TypeFor[int64]()
		if f.Optional || pooled {
			wantType = reflect.TypeFor[*int64]()
		}
		if !ok || sf.Type != wantType || len(sf.Index) != 1 {
			panic(fmt.Sprintf("api: %s needs a field %s of type %s tagged json:%q", typ, f.Name, wantType, f.Name))
		}
		b.field[i] = sf.Index[0]
	}
	return b
}

// get returns limit i of *v: nil for an optional limit unset, or when v
// has no such field.
func (b wireBinding) get(v any, i int) *int64 {
	if b.field[i] < 0 {
		return nil
	}
	switch p := reflect.ValueOf(v).Elem().Field(b.field[i]).Addr().Interface().(type) {
	case *int64:
		c := *p
		return &c
	case **int64:
		return *p
	}
	return nil
}

// set sets limit i of *v to x: nil unsets an optional limit, and sets a
// required one to 0.
func (b wireBinding) set(v any, i int, x *int64) {
	if b.field[i] < 0 {
		return
	}
	switch p := reflect.ValueOf(v).Elem().Field(b.field[i]).Addr().Interface().(type) {
	case *int64:
		*p = 0
		if x != nil {
			*p = *x
		}
	case **int64:
		*p = x
	}
}

// decodeTier reads data into a tierJSON, noting in present each field it
// holds and in problems each value of the wrong type (see readTier); err
// is a body that is not JSON, or names an unknown field.
func decodeTier(data []byte, problems map[string][]string, present map[string]bool) (in tierJSON, err error) {
	// must reads a value of type T, or notes that its field must be one.
	must := func(want string) func(*jsontext.Decoder, any) error {
		return func(dec *jsontext.Decoder, v any) error {
			// The field's path, "shadow.account.requests_per_minute"
			// in nested objects.
			field := strings.Join(slices.Collect(dec.StackPointer().Tokens()), ".")
			val, err := dec.ReadValue()
			if err != nil {
				return err
			}
			present[field] = true
			if json.Unmarshal(val, v) != nil {
				problems[field] = append(problems[field], field+" must be "+want)
			}
			return nil
		}
	}
	limit, str := must(fmt.Sprintf("an integer from 0 to %d", policy.MaxLimit)), must("a string")
	strs := must("an array of strings")
	err = unmarshalObject(data, &in, json.JoinOptions(strictOptions, json.WithUnmarshalers(json.JoinUnmarshalers(
		// A required limit has no null: null would read as 0, a tier that
		// admits nothing, where the sender may have meant no limit. (An
		// optional limit is a *int64, which null leaves nil without
		// coming here.)
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *int64) error {
			if dec.PeekKind() == 'n' {
				field := strings.Join(slices.Collect(dec.StackPointer().Tokens()), ".")
				present[field] = true
				problems[field] = append(problems[field], policy.NullRequiredLimit(field))
				return dec.SkipValue()
			}
			return limit(dec, v)
		}),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *string) error { return str(dec, v) }),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *[]string) error { return strs(dec, v) }),
	))))
	return in, err
}

// readTier reads data, the body of PUT /v1/tiers/{name} (pathName is then
// the name from the path) or one entry of a tiers file (pathName "", and
// the entry must hold a name), and returns the tier with every problem it
// has, in field order. A value of the wrong type is a problem of its field
// and reading goes on, so that a tiers file's report lists them all; a
// body that is not JSON, or names an unknown field, is one problem. The
// tier carries the name whenever there is one, to say which entry is wrong.
func readTier(data []byte, pathName string) (policy.Tier, []string) {
	problems := make(map[string][]string)
	present := make(map[string]bool)
	in, err := decodeTier(data, problems, present)
	name := pathName
	if name == "" {
		name = in.Name
	}
	if err != nil {
		if name == "" { // the name leniently, to say which entry is wrong
			var named struct{ Name string }
			_ = json.Unmarshal(data, &named)
			name = named.Name
		}
		return policy.Tier{Name: name}, []string{policy.ErrorMessage(err)}
	}
	switch {
	case pathName == "" && !present["name"]:
		return policy.Tier{}, []string{"name is required"}
	case pathName == "" && problems["name"] != nil:
		return policy.Tier{}, problems["name"]
	case pathName != "" && present["name"] && problems["name"] == nil && in.Name != pathName:
		problems["name"] = []string{fmt.Sprintf("name %s in the body does not match %s in the path", policy.Quote(in.Name), policy.Quote(pathName))}
	}
	if !policy.ValidTierName(name) {
		problems["name"] = append([]string{"tier name must match [a-z0-9][a-z0-9_-]{0,62}"}, problems["name"]...)
	}
	t := policy.Tier{Name: name, Features: in.Features, Models: in.Models, Description: in.Description}
	if t.Features == nil {
		t.Features = []string{}
	}
	if in.Shadow != nil {
		t.Shadow = &policy.RequestLimits{}
	}
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		f.Set(&t, tierWire.get(&in, i))
		if !f.Optional && !present[f.Name] {
			problems[f.Name] = append(problems[f.Name], f.Name+" is required")
		}
		if in.Account != nil {
			if t.Account == nil {
				t.Account = &policy.LimitSet{}
			}
			t.Account.Set(f, poolWire.get(in.Account, i))
		}
		if t.Shadow == nil || !f.InRequestLimits() {
			continue
		}
		t.Shadow.Limits.Set(f, shadowWire.get(in.Shadow, i))
		if field := "shadow." + f.Name; !present[field] {
			problems[field] = append(problems[field], field+" is required")
		}
		if in.Shadow.Account != nil {
			if t.Shadow.Account == nil {
				t.Shadow.Account = &policy.LimitSet{}
			}
			t.Shadow.Account.Set(f, shadowPoolWire.get(in.Shadow.Account, i))
		}
	}
	for _, fe := range t.ValidateFields() {
		if fe.Field != "name" && problems[fe.Field] == nil { // said above, in the API's words
			problems[fe.Field] = append(problems[fe.Field], fe.Message)
		}
	}
	var list []string
	for _, field := range tierFields {
		list = append(list, problems[field]...)
	}
	return t, list
}

func (s *Server) handleListTiers(c echo.Context) error {
	tiers, err := s.svc.Tiers(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]tierJSON, len(tiers))
	for i, t := range tiers {
		out[i] = tierToJSON(t)
	}
	return c.JSON(http.StatusOK, map[string]any{"tiers": out})
}

func (s *Server) handleGetTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	t, err := s.svc.Tier(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tierToJSON(t))
}

func (s *Server) handlePutTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	t, problems := readTier(data, name)
	if len(problems) > 0 {
		return policy.Errorf(policy.EINVALID, "%s", problems[0])
	}
	ctx := policy.WithChangeSource(c.Request().Context(), policy.SourceAPI)
	// If-None-Match: * (RFC 9110, section 13.1.2) makes the PUT create
	// only, so that a client never replaces a tier made by someone else.
	// Other values name entity tags, which tiers do not have: none can
	// match, so the PUT goes ahead.
	if ifNoneMatchAny(c.Request().Header.Values("If-None-Match")) {
		t, err := s.svc.CreateTier(ctx, t)
		if policy.ErrorCode(err) == policy.ECONFLICT {
			return echo.NewHTTPError(http.StatusPreconditionFailed, policy.ErrorMessage(err)+" (If-None-Match: *)")
		}
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, tierToJSON(t))
	}
	t, created, err := s.svc.PutTier(ctx, t)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, tierToJSON(t))
}

// ifNoneMatchAny reports whether If-None-Match header values are "*".
func ifNoneMatchAny(values []string) bool {
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			if strings.TrimSpace(tag) == "*" {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleDeleteTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := s.svc.DeleteTier(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
